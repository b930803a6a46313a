//! The ACL tables: unique secrets and names, creation indexes kept, the
//! bootstrap rule, and rows that survive snapshots.

use legate_types::acl::{AclLink, AclPolicy, AclRole, AclToken};
use serde_json::json;

use crate::{Command, CommandResult, StateStore, Table};

fn token(accessor: &str, secret: &str) -> AclToken {
    AclToken {
        accessor_id: accessor.into(),
        secret_id: secret.into(),
        description: "t".into(),
        policies: vec![AclLink {
            id: "p1".into(),
            name: String::new(),
        }],
        ..Default::default()
    }
}

fn policy(id: &str, name: &str) -> AclPolicy {
    AclPolicy {
        id: id.into(),
        name: name.into(),
        rules: r#"key_prefix "" { policy = "read" }"#.into(),
        ..Default::default()
    }
}

#[test]
fn acl_commands_keep_their_numbers() {
    let samples = [
        (Command::AclTokenSet(Box::new(token("a", "s"))), 18),
        (Command::AclTokenDelete("a".into()), 19),
        (Command::AclPolicySet(Box::new(policy("p", "n"))), 20),
        (Command::AclPolicyDelete("p".into()), 21),
        (Command::AclRoleSet(Box::default()), 22),
        (Command::AclRoleDelete("r".into()), 23),
        (
            Command::AclBootstrap {
                token: Box::new(token("a", "s")),
                reset_index: Some(7),
            },
            24,
        ),
        (Command::AclAuthMethodSet(Box::default()), 29),
        (Command::AclAuthMethodDelete("m".into()), 30),
        (Command::AclBindingRuleSet(Box::default()), 31),
        (Command::AclBindingRuleDelete("r".into()), 32),
        (
            Command::AclReplicate(Box::new(crate::AclReplicationBatch {
                delete_tokens: vec!["gone".into()],
                policies: vec![policy("p", "n")],
                ..Default::default()
            })),
            33,
        ),
    ];
    for (command, number) in samples {
        assert_eq!(command.type_number(), number);
        let encoded = serde_json::to_value(&command).unwrap();
        assert_eq!(encoded["Type"], json!(number.to_string()), "{encoded}");
        let decoded: Command = serde_json::from_value(encoded).unwrap();
        assert_eq!(decoded, command);
    }
}

#[test]
fn tokens_are_found_by_secret_and_secrets_stay_unique() {
    let store = StateStore::new();
    assert_eq!(
        store.apply(3, &Command::AclTokenSet(Box::new(token("a", "s1")))),
        CommandResult::Done
    );
    assert_eq!(
        store.apply(4, &Command::AclTokenSet(Box::new(token("b", "s1")))),
        CommandResult::Failed("Invalid Token: SecretID is already in use".into())
    );
    {
        let read = store.read();
        assert_eq!(read.acl_token_by_secret("s1").unwrap().accessor_id, "a");
        assert_eq!(read.acl_token("a").0, 3);
    }
    // An update keeps the creation index; a new secret replaces the old one.
    let mut changed = token("a", "s2");
    changed.description = "changed".into();
    store.apply(5, &Command::AclTokenSet(Box::new(changed)));
    {
        let read = store.read();
        let stored = read.acl_token("a").1.unwrap();
        assert_eq!((stored.create_index, stored.modify_index), (3, 5));
        assert!(read.acl_token_by_secret("s1").is_none());
        assert_eq!(
            read.acl_token_by_secret("s2").unwrap().description,
            "changed"
        );
    }
    store.apply(6, &Command::AclTokenDelete("a".into()));
    assert!(store.read().acl_token_by_secret("s2").is_none());
    assert_eq!(store.read().table_index(Table::AclTokens), 6);
    // Deleting what is not there changes no index.
    store.apply(7, &Command::AclTokenDelete("a".into()));
    assert_eq!(store.read().table_index(Table::AclTokens), 6);
}

#[test]
fn policy_and_role_names_are_unique_without_regard_to_case() {
    let store = StateStore::new();
    store.apply(1, &Command::AclPolicySet(Box::new(policy("p1", "web"))));
    assert_eq!(
        store.apply(2, &Command::AclPolicySet(Box::new(policy("p2", "WEB")))),
        CommandResult::Failed("Invalid Policy: A Policy with Name \"WEB\" already exists".into())
    );
    // Renaming itself is fine.
    store.apply(3, &Command::AclPolicySet(Box::new(policy("p1", "Web"))));
    assert_eq!(
        store.read().acl_policy_by_name("web").unwrap().create_index,
        1
    );
    let role = |id: &str, name: &str| AclRole {
        id: id.into(),
        name: name.into(),
        ..Default::default()
    };
    store.apply(4, &Command::AclRoleSet(Box::new(role("r1", "ops"))));
    assert!(matches!(
        store.apply(5, &Command::AclRoleSet(Box::new(role("r2", "Ops")))),
        CommandResult::Failed(m) if m.contains("A Role with Name")
    ));
    store.apply(6, &Command::AclRoleDelete("r1".into()));
    assert!(store.read().acl_role_by_name("ops").is_none());
}

#[test]
fn bootstrap_happens_once_unless_reset_with_its_index() {
    let store = StateStore::new();
    let bootstrap = |index: u64, accessor: &str, reset: Option<u64>| {
        store.apply(
            index,
            &Command::AclBootstrap {
                token: Box::new(token(accessor, &format!("secret-{accessor}"))),
                reset_index: reset,
            },
        )
    };
    assert_eq!(store.read().acl_bootstrap_index(), 0);
    assert_eq!(bootstrap(10, "a", None), CommandResult::Applied(true));
    assert_eq!(store.read().acl_bootstrap_index(), 10);
    assert_eq!(bootstrap(11, "b", None), CommandResult::Applied(false));
    assert_eq!(bootstrap(12, "c", Some(9)), CommandResult::Applied(false));
    assert!(store.read().acl_token("c").1.is_none());
    assert_eq!(bootstrap(13, "d", Some(10)), CommandResult::Applied(true));
    assert_eq!(store.read().acl_bootstrap_index(), 13);
}

#[test]
fn acl_rows_and_the_bootstrap_index_survive_snapshots_and_restores() {
    let store = StateStore::new();
    store.apply(
        2,
        &Command::AclBootstrap {
            token: Box::new(token("a", "s1")),
            reset_index: None,
        },
    );
    store.apply(3, &Command::AclPolicySet(Box::new(policy("p1", "web"))));
    store.apply(
        4,
        &Command::AclRoleSet(Box::new(AclRole {
            id: "r1".into(),
            name: "ops".into(),
            ..Default::default()
        })),
    );
    let bytes = store.snapshot().unwrap();
    let copy = StateStore::new();
    copy.restore(&bytes).unwrap();
    assert_eq!(copy.snapshot().unwrap(), bytes);
    let read = copy.read();
    assert_eq!(read.acl_token_by_secret("s1").unwrap().accessor_id, "a");
    assert_eq!(read.acl_policy_by_name("web").unwrap().id, "p1");
    assert_eq!(read.acl_role("r1").1.unwrap().name, "ops");
    assert_eq!(read.acl_bootstrap_index(), 2);
    assert!(read.has_acl_rows());
}

#[test]
fn deleting_an_auth_method_takes_its_rules_and_tokens_and_all_survive_snapshots() {
    use legate_types::acl_auth::{AclAuthMethod, AclBindingRule};
    let store = StateStore::new();
    let method = |name: &str| AclAuthMethod {
        name: name.into(),
        r#type: "jwt".into(),
        ..Default::default()
    };
    let rule = |id: &str, method: &str| AclBindingRule {
        id: id.into(),
        auth_method: method.into(),
        bind_type: "service".into(),
        bind_name: "web".into(),
        ..Default::default()
    };
    assert_eq!(
        store.apply(1, &Command::AclBindingRuleSet(Box::new(rule("r0", "nope")))),
        CommandResult::Failed("cannot find auth method with name \"nope\"".into())
    );
    store.apply(2, &Command::AclAuthMethodSet(Box::new(method("m1"))));
    store.apply(3, &Command::AclAuthMethodSet(Box::new(method("m2"))));
    store.apply(4, &Command::AclBindingRuleSet(Box::new(rule("r1", "m1"))));
    store.apply(5, &Command::AclBindingRuleSet(Box::new(rule("r2", "m2"))));
    let mut login = token("t1", "s1");
    login.auth_method = "m1".into();
    login.local = true;
    store.apply(6, &Command::AclTokenSet(Box::new(login)));
    // A global token of a primary method named alike, replicated here.
    let mut replicated = token("g1", "sg");
    replicated.auth_method = "m1".into();
    store.apply(6, &Command::AclTokenSet(Box::new(replicated)));
    // A login token of a method that is gone is refused.
    let mut orphan = token("t9", "s9");
    orphan.auth_method = "gone".into();
    assert_eq!(
        store.apply(6, &Command::AclTokenSet(Box::new(orphan))),
        CommandResult::Failed("No such auth method with Name: gone".into())
    );
    store.apply(7, &Command::AclTokenSet(Box::new(token("t2", "s2"))));
    let bytes = store.snapshot().unwrap();
    let copy = StateStore::new();
    copy.restore(&bytes).unwrap();
    assert_eq!(copy.read().acl_binding_rules().1.count(), 2);
    assert_eq!(copy.read().acl_auth_method("m1").1.unwrap().create_index, 2);

    store.apply(8, &Command::AclAuthMethodDelete("m1".into()));
    let read = store.read();
    assert!(read.acl_auth_method("m1").1.is_none());
    assert!(read.acl_binding_rule("r1").1.is_none());
    assert!(
        read.acl_binding_rule("r2").1.is_some(),
        "another method's rule stays"
    );
    assert!(read.acl_token("t1").1.is_none(), "its login token goes");
    assert!(
        read.acl_token("g1").1.is_some(),
        "a global token of another locality stays"
    );
    assert!(read.acl_token("t2").1.is_some());
    assert_eq!(read.table_index(Table::AclTokens), 8);
}

#[test]
fn replicated_rows_take_names_from_local_rows_and_keep_local_secrets() {
    use crate::AclReplicationBatch;
    let store = StateStore::new();
    store.apply(1, &Command::AclPolicySet(Box::new(policy("p1", "ops"))));
    store.apply(2, &Command::AclPolicySet(Box::new(policy("p2", "old"))));
    let mut local = token("mine", "shared-secret");
    local.local = true;
    store.apply(3, &Command::AclTokenSet(Box::new(local)));
    // In the primary p1 was renamed and p3 took its old name; p2 went; a
    // global login token whose method lives only in the primary came; a
    // global token reuses the secret of the secondary's local token.
    let mut login = token("login", "s-login");
    login.auth_method = "primary-only".into();
    // A global token may not take a local token's AccessorID either, nor
    // may a deletion remove a local token, nor may a local token come in.
    let mut marked_local = token("stray", "s-stray");
    marked_local.local = true;
    let batch = AclReplicationBatch {
        delete_policies: vec!["p2".into()],
        delete_tokens: vec!["mine".into()],
        policies: vec![policy("p3", "ops"), policy("p1", "ops-renamed")],
        tokens: vec![
            login,
            token("clash", "shared-secret"),
            token("mine", "other-secret"),
            marked_local,
        ],
        ..Default::default()
    };
    assert_eq!(
        store.apply(4, &Command::AclReplicate(Box::new(batch))),
        CommandResult::Applied(false),
        "the tokens that would replace a local one are skipped"
    );
    let read = store.read();
    assert_eq!(read.acl_policy_by_name("ops").unwrap().id, "p3");
    assert!(read.acl_policy("p2").1.is_none());
    // p1 gave its name up and took its new one in the same batch.
    assert_eq!(read.acl_policy("p1").1.unwrap().name, "ops-renamed");
    assert!(read.acl_token("login").1.is_some());
    assert!(read.acl_token("clash").1.is_none());
    assert_eq!(
        read.acl_token_by_secret("shared-secret")
            .unwrap()
            .accessor_id,
        "mine"
    );
    assert!(read.acl_token("stray").1.is_none());
    let mine = read.acl_token("mine").1.unwrap();
    assert!(mine.local && mine.secret_id == "shared-secret");
    assert_eq!(read.table_index(Table::AclPolicies), 4);
}

#[test]
fn login_tokens_are_indexed_by_method_and_bindings() {
    use legate_types::acl::ServiceIdentity;
    let store = StateStore::new();
    let method = legate_types::acl_auth::AclAuthMethod {
        name: "m".into(),
        r#type: "jwt".into(),
        ..Default::default()
    };
    store.apply(1, &Command::AclAuthMethodSet(Box::new(method)));
    let login = |accessor: &str, service: &str| {
        let mut t = token(accessor, &format!("s-{accessor}"));
        t.policies.clear();
        t.auth_method = "m".into();
        t.service_identities = vec![ServiceIdentity {
            service_name: service.into(),
            datacenters: Vec::new(),
        }];
        t
    };
    for (i, (accessor, service)) in [("a1", "web"), ("a2", "web"), ("b1", "db")]
        .into_iter()
        .enumerate()
    {
        store.apply(
            2 + i as u64,
            &Command::AclTokenSet(Box::new(login(accessor, service))),
        );
    }
    let like = |store: &StateStore, service: &str| -> Vec<String> {
        let read = store.read();
        let mut found: Vec<String> = read
            .acl_login_tokens_like(&login("probe", service))
            .map(|t| t.accessor_id.clone())
            .collect();
        found.sort();
        found
    };
    assert_eq!(like(&store, "web"), ["a1", "a2"]);
    assert_eq!(like(&store, "db"), ["b1"]);
    // A token that login did not make is never in the index.
    let mut plain = login("p", "web");
    plain.auth_method.clear();
    assert_eq!(store.read().acl_login_tokens_like(&plain).count(), 0);
    // Rebinding and deleting move the index along; a restore rebuilds it.
    store.apply(5, &Command::AclTokenSet(Box::new(login("a2", "db"))));
    store.apply(6, &Command::AclTokenDelete("b1".into()));
    assert_eq!(like(&store, "web"), ["a1"]);
    assert_eq!(like(&store, "db"), ["a2"]);
    let copy = StateStore::new();
    copy.restore(&store.snapshot().unwrap()).unwrap();
    assert_eq!(like(&copy, "db"), ["a2"]);
}
