//! Feature flags for rolling upgrades. Each server advertises the features
//! it supports (Consul's `ft_<name>` member tags); the leader turns a
//! feature on only when every known server supports it, so a
//! mixed-version cluster never writes data an older server cannot read.
//! With one server the set is its own; clustering adds the members'.

use std::collections::BTreeSet;

/// Intentions stored as `service-intentions` config entries (`ft_si`).
pub const INTENTIONS_AS_CONFIG_ENTRIES: &str = "si";
/// Federation states (`ft_fs`, Consul's flag). Legate builds before the
/// federation-state table advertised it too, so the table also needs
/// [`FEDERATION_STATE_TABLE`].
pub const FEDERATION_STATES: &str = "fs";

/// Legate's federation-state table: FSM commands 16/17 and snapshot
/// record 16 (`ft_fst`).
pub const FEDERATION_STATE_TABLE: &str = "fst";

/// A secondary's own intermediate CA, kept beside the primary's roots
/// (`ft_ica`): an older server would sign leaves with the wrong issuer.
pub const SECONDARY_INTERMEDIATES: &str = "ica";

/// Snapshot restores logged in pieces (`ft_rp`): archives larger than
/// one Raft entry.
pub const PIECEWISE_RESTORE: &str = "rp";

/// Legate's ACL tables: FSM commands 18-24 and snapshot records 17-19
/// (`ft_acl`).
pub const ACL_TABLES: &str = "acl";

/// Legate's prepared-query table: FSM commands 25/26 and snapshot record
/// 20 (`ft_pq`).
pub const PREPARED_QUERIES: &str = "pq";

/// Transactions with node, service, check and session operations: FSM
/// command 27 (`ft_txc`).
pub const CATALOG_TXN: &str = "txc";

/// Autopilot's configuration set by the operator: FSM command 28
/// (`ft_apc`).
pub const AUTOPILOT_CONFIG: &str = "apc";

/// Templated policies on ACL tokens and roles (`ft_tp`): an older server
/// would drop them from what it stores.
pub const TEMPLATED_POLICIES: &str = "tp";

/// Auth methods and binding rules: FSM commands 29-32 and snapshot
/// records 21/22 (`ft_am`).
pub const AUTH_METHODS: &str = "am";

/// ACL rows replicated from the primary: FSM command 33 (`ft_ar`).
pub const ACL_REPLICATION: &str = "ar";

/// Network coordinates in the Raft log (`ft_co`).
pub const COORDINATES: &str = crate::coordinates::FEATURE;

/// Every feature this build supports.
pub const SUPPORTED: &[&str] = &[
    INTENTIONS_AS_CONFIG_ENTRIES,
    FEDERATION_STATES,
    FEDERATION_STATE_TABLE,
    SECONDARY_INTERMEDIATES,
    PIECEWISE_RESTORE,
    COORDINATES,
    ACL_TABLES,
    PREPARED_QUERIES,
    CATALOG_TXN,
    AUTOPILOT_CONFIG,
    TEMPLATED_POLICIES,
    AUTH_METHODS,
    ACL_REPLICATION,
];

/// The features a server advertises: this build's, minus any masked.
pub fn advertised(masked: &[String]) -> BTreeSet<String> {
    SUPPORTED
        .iter()
        .filter(|f| !masked.iter().any(|m| m == *f))
        .map(|f| f.to_string())
        .collect()
}

/// The member tags carrying `features` (`ft_si = "1"`).
pub fn tags(features: &BTreeSet<String>) -> Vec<(String, String)> {
    features
        .iter()
        .map(|f| (format!("ft_{f}"), "1".to_string()))
        .collect()
}

/// Whether a feature may be turned on: at least one server is known and
/// every one advertises it.
pub fn cluster_supports(servers: &[BTreeSet<String>], feature: &str) -> bool {
    !servers.is_empty() && servers.iter().all(|s| s.contains(feature))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_needs_every_server() {
        let all = advertised(&[]);
        let old = advertised(&[INTENTIONS_AS_CONFIG_ENTRIES.to_string()]);
        assert!(cluster_supports(
            std::slice::from_ref(&all),
            INTENTIONS_AS_CONFIG_ENTRIES
        ));
        assert!(!cluster_supports(
            &[all.clone(), old.clone()],
            INTENTIONS_AS_CONFIG_ENTRIES
        ));
        assert!(cluster_supports(&[all.clone(), old], FEDERATION_STATES));
        assert!(!cluster_supports(&[], FEDERATION_STATES));
        assert_eq!(
            tags(&all),
            vec![
                ("ft_acl".to_string(), "1".to_string()),
                ("ft_am".to_string(), "1".to_string()),
                ("ft_apc".to_string(), "1".to_string()),
                ("ft_ar".to_string(), "1".to_string()),
                ("ft_co".to_string(), "1".to_string()),
                ("ft_fs".to_string(), "1".to_string()),
                ("ft_fst".to_string(), "1".to_string()),
                ("ft_ica".to_string(), "1".to_string()),
                ("ft_pq".to_string(), "1".to_string()),
                ("ft_rp".to_string(), "1".to_string()),
                ("ft_si".to_string(), "1".to_string()),
                ("ft_tp".to_string(), "1".to_string()),
                ("ft_txc".to_string(), "1".to_string())
            ]
        );
    }
}
