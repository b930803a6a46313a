//! The rules language and its decisions, case by case against Consul's
//! documented behaviour (acl-rules.mdx, policy_authorizer.go semantics).

use legate_acl::{parse, Access, Authorizer, DefaultPolicy, PolicyAuthorizer, Resource, Rules};

fn authorizer(policies: &[&str], default: DefaultPolicy) -> Authorizer {
    let parsed: Vec<Rules> = policies.iter().map(|p| parse(p).unwrap()).collect();
    Authorizer::new(PolicyAuthorizer::new(&parsed), default)
}

#[test]
fn hcl_and_json_forms_parse_to_the_same_rules() {
    let hcl = r#"
key_prefix "" { policy = "read" }
key "secret/db" { policy = "deny" }
service "web" { policy = "write" intentions = "read" }
service_prefix "" { policy = "read" }
operator = "read"
"#;
    let json = r#"{
  "key_prefix": {"": {"policy": "read"}},
  "key": {"secret/db": {"policy": "deny"}},
  "service": {"web": {"policy": "write", "intentions": "read"}},
  "service_prefix": {"": {"policy": "read"}},
  "operator": "read"
}"#;
    let mut a = parse(hcl).unwrap();
    let mut b = parse(json).unwrap();
    for rules in [&mut a, &mut b] {
        rules.rules.sort_by(|x, y| {
            (x.resource, &x.label, x.prefix).cmp(&(y.resource, &y.label, y.prefix))
        });
    }
    assert_eq!(a, b);
    // service rules bring intention rules: 2 key + 2 service + 2 intention.
    assert_eq!(a.rules.len(), 6);
}

#[test]
fn repeated_blocks_of_one_resource_all_count() {
    let rules = parse(
        r#"
node "a" { policy = "write" }
node "b" { policy = "read" }
node_prefix "c" { policy = "deny" }
"#,
    )
    .unwrap();
    let labels: Vec<(&str, bool)> = rules
        .rules
        .iter()
        .map(|r| (r.label.as_str(), r.prefix))
        .collect();
    assert_eq!(labels, [("a", false), ("b", false), ("c", true)]);
}

#[test]
fn bad_rules_get_consuls_errors() {
    let err = parse(r#"key "foo" { policy = "nope" }"#).unwrap_err();
    assert_eq!(
        err,
        r#"Invalid key policy: &acl.KeyRule{Prefix:"foo", Policy:"nope", EnterpriseRule:acl.EnterpriseRule{}}"#
    );
    let err = parse(r#"service "web" { policy = "list" }"#).unwrap_err();
    assert!(err.starts_with("Invalid service policy: "), "{err}");
    let err = parse(r#"service "web" { policy = "read" intentions = "list" }"#).unwrap_err();
    assert!(
        err.starts_with("Invalid service intentions policy: "),
        "{err}"
    );
    assert_eq!(
        parse(r#"operator = "sudo""#).unwrap_err(),
        r#"Invalid operator policy: "sudo""#
    );
    let err = parse("key \"unterminated { policy = \"read\" }").unwrap_err();
    assert!(err.starts_with("Failed to parse ACL rules: "), "{err}");
    let err = parse(r#"{"key": "#).unwrap_err();
    assert!(err.starts_with("Failed to parse ACL rules: "), "{err}");
    // A resource Consul has no such word for (a typo that would grant nothing).
    let err = parse(r#"services "web" { policy = "read" }"#).unwrap_err();
    assert!(err.contains("unknown resource \"services\""), "{err}");
    // Only keys take list.
    assert!(parse(r#"key_prefix "" { policy = "list" }"#).is_ok());
    // Enterprise scopes are ignored, as by Consul CE.
    assert!(parse(r#"namespace "team" { key_prefix "" { policy = "write" } }"#).is_ok());
}

#[test]
fn exact_beats_prefix_and_the_longest_prefix_wins() {
    let a = authorizer(
        &[r#"
key_prefix "" { policy = "read" }
key_prefix "app/" { policy = "write" }
key_prefix "app/secret/" { policy = "deny" }
key "app/secret/public" { policy = "read" }
"#],
        DefaultPolicy::Deny,
    );
    assert!(a.allowed(Resource::Key, "other", Access::Read));
    assert!(!a.allowed(Resource::Key, "other", Access::Write));
    assert!(a.allowed(Resource::Key, "app/config", Access::Write));
    assert!(!a.allowed(Resource::Key, "app/secret/x", Access::Read));
    assert!(a.allowed(Resource::Key, "app/secret/public", Access::Read));
    assert!(!a.allowed(Resource::Key, "app/secret/public", Access::Write));
}

#[test]
fn write_covers_list_covers_read_and_deny_stops_the_default() {
    let a = authorizer(
        &[r#"
key "w" { policy = "write" }
key "l" { policy = "list" }
key "r" { policy = "read" }
key "d" { policy = "deny" }
"#],
        DefaultPolicy::Allow,
    );
    let grants = |key: &str| {
        [Access::Read, Access::List, Access::Write].map(|acc| a.allowed(Resource::Key, key, acc))
    };
    assert_eq!(grants("w"), [true, true, true]);
    assert_eq!(grants("l"), [true, true, false]);
    assert_eq!(grants("r"), [true, false, false]);
    assert_eq!(grants("d"), [false, false, false]);
    // No rule: the default (allow).
    assert_eq!(grants("unruled"), [true, true, true]);
}

#[test]
fn merged_policies_take_deny_then_write_then_list_then_read() {
    let a = authorizer(
        &[
            r#"service "web" { policy = "read" }  key "k" { policy = "write" }  operator = "read""#,
            r#"service "web" { policy = "write" } key "k" { policy = "deny" }   operator = "write""#,
        ],
        DefaultPolicy::Deny,
    );
    assert!(a.allowed(Resource::Service, "web", Access::Write));
    assert!(!a.allowed(Resource::Key, "k", Access::Read));
    assert!(a.allowed(Resource::Operator, "", Access::Write));
}

#[test]
fn service_rules_govern_intentions() {
    let a = authorizer(
        &[r#"
service "web" { policy = "write" intentions = "write" }
service "api" { policy = "write" }
service "db" { policy = "deny" }
service_prefix "" { policy = "read" }
"#],
        DefaultPolicy::Allow,
    );
    assert!(a.allowed(Resource::Intention, "web", Access::Write));
    // Omitted: read with a read or write policy.
    assert!(a.allowed(Resource::Intention, "api", Access::Read));
    assert!(!a.allowed(Resource::Intention, "api", Access::Write));
    // Deny with a deny policy, even under an allow default.
    assert!(!a.allowed(Resource::Intention, "db", Access::Read));
    assert!(a.allowed(Resource::Intention, "other", Access::Read));
}

#[test]
fn mesh_and_peering_fall_back_to_operator() {
    let a = authorizer(&[r#"operator = "write""#], DefaultPolicy::Deny);
    assert!(a.allowed(Resource::Mesh, "", Access::Write));
    assert!(a.allowed(Resource::Peering, "", Access::Write));
    let b = authorizer(
        &[r#"operator = "write"  mesh = "read""#],
        DefaultPolicy::Deny,
    );
    assert!(!b.allowed(Resource::Mesh, "", Access::Write));
    assert!(b.allowed(Resource::Mesh, "", Access::Read));
}

#[test]
fn the_allow_default_still_guards_the_acl_system_and_snapshots() {
    let allow = authorizer(&[], DefaultPolicy::Allow);
    assert!(allow.allowed(Resource::Key, "anything", Access::Write));
    assert!(allow.allowed(Resource::Operator, "", Access::Write));
    assert!(!allow.allowed(Resource::Acl, "", Access::Read));
    assert!(!allow.snapshot_allowed());
    let deny = authorizer(&[], DefaultPolicy::Deny);
    assert!(!deny.allowed(Resource::Node, "n1", Access::Read));
    assert!(!deny.intention_default_allow());
    let management = Authorizer::management();
    assert!(management.allowed(Resource::Acl, "", Access::Write));
    assert!(management.snapshot_allowed());
    // acl = "write" grants snapshots over a deny default.
    let acl_writer = authorizer(&[r#"acl = "write""#], DefaultPolicy::Deny);
    assert!(acl_writer.snapshot_allowed());
    assert!(!authorizer(&[r#"acl = "read""#], DefaultPolicy::Allow).snapshot_allowed());
}

#[test]
fn writing_a_whole_prefix_needs_write_on_everything_under_it() {
    let a = authorizer(
        &[r#"
key_prefix "app/" { policy = "write" }
key "app/locked" { policy = "read" }
key_prefix "tmp/" { policy = "write" }
key_prefix "ro/" { policy = "read" }
"#],
        DefaultPolicy::Deny,
    );
    assert!(a.key_write_prefix_allowed("tmp/"));
    assert!(a.key_write_prefix_allowed("app/sub/"));
    // A read-only key under the prefix refuses the recursive delete.
    assert!(!a.key_write_prefix_allowed("app/"));
    assert!(!a.key_write_prefix_allowed("ro/"));
    // No rule at all: the default.
    assert!(!a.key_write_prefix_allowed("elsewhere/"));
    assert!(authorizer(&[], DefaultPolicy::Allow).key_write_prefix_allowed("x/"));
    // An allow default does not cover a read-only rule under the prefix.
    let b = authorizer(&[r#"key "x/ro" { policy = "read" }"#], DefaultPolicy::Allow);
    assert!(!b.key_write_prefix_allowed("x/"));
}

#[test]
fn names_with_multibyte_characters_match_prefixes_safely() {
    let a = authorizer(
        &[r#"key_prefix "é" { policy = "write" }"#],
        DefaultPolicy::Deny,
    );
    assert!(!a.allowed(Resource::Key, "ecole", Access::Read));
    assert!(a.allowed(Resource::Key, "été", Access::Write));
}

#[test]
fn identities_expand_to_consuls_synthetic_policies() {
    use legate_acl::identities::*;
    let rules = service_identity_rules("web");
    let id = synthetic_policy_id(&rules);
    // Consul's preview IDs start with the rules' own bytes ("\nservi...").
    assert!(id.starts_with("0a7365727669"), "{id}");
    assert!(id.ends_with("6c62272e07bb014262b821756295c58d"), "{id}");
    assert_eq!(id.len(), (rules.len() + 16) * 2);
    assert_eq!(
        synthetic_policy_description("service", "web"),
        "synthetic policy for service identity \"web\""
    );
    let a = Authorizer::new(
        PolicyAuthorizer::new(&[parse(&rules).unwrap()]),
        DefaultPolicy::Deny,
    );
    assert!(a.allowed(Resource::Service, "web", Access::Write));
    assert!(a.allowed(Resource::Service, "web-sidecar-proxy", Access::Write));
    assert!(!a.allowed(Resource::Service, "db", Access::Write));
    assert!(a.allowed(Resource::Service, "db", Access::Read));
    assert!(a.allowed(Resource::Node, "n9", Access::Read));
    assert!(!a.allowed(Resource::Key, "k", Access::Read));
    let node = Authorizer::new(
        PolicyAuthorizer::new(&[parse(&node_identity_rules("n1")).unwrap()]),
        DefaultPolicy::Deny,
    );
    assert!(node.allowed(Resource::Node, "n1", Access::Write));
    assert!(!node.allowed(Resource::Node, "n2", Access::Read));
    assert!(valid_identity_name("web_v2-a"));
    assert!(!valid_identity_name("Web"));
    assert!(!valid_identity_name(&"a".repeat(257)));
}

/// Consul's `NodeReadAll`/`ServiceReadAll` (the UI's metrics proxy): read on
/// the empty prefix and no rule granting less, else the default decides.
#[test]
fn read_of_every_name_needs_the_empty_prefix_and_no_lesser_rule() {
    let all = authorizer(
        &[r#"service_prefix "" { policy = "read" }"#],
        DefaultPolicy::Deny,
    );
    assert!(all.all_allowed(Resource::Service, Access::Read));
    assert!(!all.all_allowed(Resource::Service, Access::Write));
    assert!(!all.all_allowed(Resource::Node, Access::Read));
    let one_denied = authorizer(
        &[r#"service_prefix "" { policy = "write" } service "db" { policy = "deny" }"#],
        DefaultPolicy::Deny,
    );
    assert!(!one_denied.all_allowed(Resource::Service, Access::Read));
    let only_some = authorizer(
        &[r#"service "web" { policy = "read" }"#],
        DefaultPolicy::Allow,
    );
    assert!(only_some.all_allowed(Resource::Service, Access::Read));
    let narrow = authorizer(
        &[r#"service_prefix "w" { policy = "deny" }"#],
        DefaultPolicy::Allow,
    );
    assert!(!narrow.all_allowed(Resource::Service, Access::Read));
    assert!(Authorizer::management().all_allowed(Resource::Node, Access::Read));
}
