//! The `acl {}` block and the older keys it replaced.

use std::time::Duration;

use legate_agent::config::{load, ConfigSource};

fn config(hcl: &str) -> Result<legate_agent::config::AgentConfig, String> {
    load(&[ConfigSource::Hcl(hcl.into())]).map_err(|e| e.to_string())
}

#[test]
fn the_acl_block_is_read_with_consuls_defaults() {
    let c = config("").unwrap();
    assert!(!c.acl.enabled);
    assert_eq!(c.acl.default_policy, "allow");
    assert_eq!(c.acl.down_policy, "extend-cache");
    assert_eq!(c.acl.token_ttl, Duration::from_secs(30));
    let c = config(
        r#"acl {
  enabled = true
  default_policy = "deny"
  down_policy = "async-cache"
  enable_token_persistence = true
  token_ttl = "10m"
  tokens {
    initial_management = "root"
    agent = "agent-secret"
    agent_recovery = "recovery"
    default = "default-secret"
    dns = "dns-secret"
    config_file_service_registration = "files"
  }
}"#,
    )
    .unwrap();
    assert!(c.acl.enabled && c.acl.enable_token_persistence);
    assert_eq!(c.acl.default_policy, "deny");
    assert_eq!(c.acl.down_policy, "async-cache");
    assert_eq!(c.acl.token_ttl, Duration::from_secs(600));
    let t = &c.acl.tokens;
    assert_eq!(t.initial_management.as_deref(), Some("root"));
    assert_eq!(t.agent.as_deref(), Some("agent-secret"));
    assert_eq!(t.agent_recovery.as_deref(), Some("recovery"));
    assert_eq!(t.default.as_deref(), Some("default-secret"));
    assert_eq!(t.dns.as_deref(), Some("dns-secret"));
    assert_eq!(t.config_file_service_registration.as_deref(), Some("files"));
}

#[test]
fn the_old_keys_still_work_with_consuls_warning_and_lose_to_the_new_ones() {
    let c = config(
        r#"
acl_datacenter = "dc1"
acl_master_token = "old-root"
acl_token = "old-default"
acl_agent_token = "old-agent"
acl_agent_master_token = "old-recovery"
acl_default_policy = "deny"
acl_ttl = "45s"
acl { tokens { agent = "new-agent" } }
"#,
    )
    .unwrap();
    assert!(c.acl.enabled, "acl_datacenter turns ACLs on");
    assert_eq!(c.primary_datacenter, "dc1");
    assert_eq!(c.acl.default_policy, "deny");
    assert_eq!(c.acl.token_ttl, Duration::from_secs(45));
    assert_eq!(c.acl.tokens.initial_management.as_deref(), Some("old-root"));
    assert_eq!(c.acl.tokens.default.as_deref(), Some("old-default"));
    assert_eq!(c.acl.tokens.agent.as_deref(), Some("new-agent"));
    assert_eq!(c.acl.tokens.agent_recovery.as_deref(), Some("old-recovery"));
    assert!(c
        .warnings
        .iter()
        .any(|w| w == "The 'acl_master_token' field is deprecated. Use the 'acl.tokens.initial_management' field instead."));
    assert!(c
        .warnings
        .iter()
        .any(|w| w
            == "The 'acl_token' field is deprecated. Use the 'acl.tokens.default' field instead."));
    assert!(
        !c.warnings.iter().any(|w| w.contains("acl_agent_token")),
        "{:?}",
        c.warnings
    );
    // Token replication: the new key, else `enable_acl_replication`, else
    // a top-level `acl_replication_token`.
    let c = config(r#"enable_acl_replication = true"#).unwrap();
    assert!(c.acl.enable_token_replication);
    assert!(c.warnings.iter().any(|w| w
        == "The 'enable_acl_replication' field is deprecated. Use the 'acl.enable_token_replication' field instead."));
    assert!(
        !c.warnings.iter().any(|w| w.contains("not implemented")),
        "{:?}",
        c.warnings
    );
    let c =
        config("enable_acl_replication = true\nacl { enable_token_replication = false }").unwrap();
    assert!(!c.acl.enable_token_replication);
    assert!(
        config(r#"acl_replication_token = "r""#)
            .unwrap()
            .acl
            .enable_token_replication
    );
    assert!(
        !config(r#"acl { tokens { replication = "r" } }"#)
            .unwrap()
            .acl
            .enable_token_replication
    );
    let c = config(r#"acl { tokens { master = "m" agent_master = "a" } }"#).unwrap();
    assert_eq!(c.acl.tokens.initial_management.as_deref(), Some("m"));
    assert_eq!(c.acl.tokens.agent_recovery.as_deref(), Some("a"));
}

#[test]
fn bad_acl_settings_are_refused_naming_the_key() {
    let err = config(r#"acl { default_policy = "maybe" }"#).unwrap_err();
    assert!(
        err.contains("acl.default_policy") && err.contains("maybe"),
        "{err}"
    );
    let err = config(r#"acl { down_policy = "panic" }"#).unwrap_err();
    assert!(err.contains("acl.down_policy"), "{err}");
    let err = config(r#"acl { token_ttl = "forever" }"#).unwrap_err();
    assert!(err.contains("acl.token_ttl"), "{err}");
    let err = config(r#"acl { enabled = "sometimes" }"#).unwrap_err();
    assert!(err.contains("acl.enabled"), "{err}");
}

#[test]
fn agent_tokens_set_at_run_time_persist_and_win_over_the_config() {
    use legate_agent::acl_config::AclTokens;
    use legate_agent::acl_tokens::TokenStore;
    let dir = tempfile::tempdir().unwrap();
    let configured = AclTokens {
        default: Some("from-config".into()),
        ..Default::default()
    };
    let mut warnings = Vec::new();
    let store = TokenStore::new(&configured, true, Some(dir.path()), &mut warnings);
    assert_eq!(store.default_token().as_deref(), Some("from-config"));
    store.set("acl_token", "set-by-api".into()).unwrap();
    store.set("agent", "agent-secret".into()).unwrap();
    assert_eq!(
        store.set("nonsense", "x".into()).unwrap_err(),
        "Token \"nonsense\" is unknown"
    );
    let file = dir.path().join("acl-tokens.json");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["default"], "set-by-api");
    assert_eq!(saved["agent"], "agent-secret");
    // The next start: the persisted token wins, with Consul's warning.
    let again = TokenStore::new(&configured, true, Some(dir.path()), &mut warnings);
    assert_eq!(again.default_token().as_deref(), Some("set-by-api"));
    assert_eq!(again.agent_token(), "agent-secret");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("\"default\" token present in both")),
        "{warnings:?}"
    );
    // Without persistence nothing is read or written.
    let off = TokenStore::new(&configured, false, Some(dir.path()), &mut Vec::new());
    assert_eq!(off.default_token().as_deref(), Some("from-config"));
    // Registrations sync with their own token, then the file token for
    // config-file services, then the default.
    let tokens = AclTokens {
        default: Some("d".into()),
        config_file_service_registration: Some("f".into()),
        ..Default::default()
    };
    let store = TokenStore::new(&tokens, false, None, &mut Vec::new());
    assert_eq!(store.registration_token("own", true), "own");
    assert_eq!(store.registration_token("", true), "f");
    assert_eq!(store.registration_token("", false), "d");
    assert_eq!(store.agent_token(), "d");
}
