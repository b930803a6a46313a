//! Config-entry replication into a secondary (Consul's
//! `config_replication.go`, kind-aware as since #8834): the secondary's
//! leader names the kinds it understands, the primary answers only those,
//! and the difference is applied here entry by entry. An entry this
//! datacenter cannot validate is logged and skipped while the rest apply;
//! entries refused only because of the order they came in (a router before
//! the defaults that make its service HTTP) are tried again in the same
//! round until nothing more applies.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use legate_state::{Command, CommandResult};
use legate_types::config_entry::{self, ConfigEntry};
use legate_types::RpcError;

use crate::replication::{fetch_options, TokenBucket, APPLY_RATE};
use crate::Server;

/// Kinds that never leave their datacenter.
const LOCAL_KINDS: &[&str] = &["exported-services"];

/// What an old secondary that names no kinds receives (Consul 1.8.0's set).
pub(crate) const KINDS_WITHOUT_A_LIST: &[&str] = &[
    "service-defaults",
    "proxy-defaults",
    "service-router",
    "service-splitter",
    "service-resolver",
    "ingress-gateway",
    "terminating-gateway",
];

/// One change a round makes to the secondary's entries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ConfigOp {
    /// Write the primary's entry.
    Upsert(ConfigEntry),
    /// Remove an entry the primary no longer has.
    Delete {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
}

impl ConfigOp {
    fn label(&self) -> String {
        match self {
            ConfigOp::Upsert(e) => e.label(),
            ConfigOp::Delete { kind, name } => format!("{kind}/{name}"),
        }
    }
}

/// The changes that make `local` equal to `remote` (both of the replicated
/// kinds): deletes of entries only `local` has, then upserts of entries
/// only `remote` has or whose content differs, each in (kind, name) order.
pub(crate) fn plan(local: &[ConfigEntry], remote: &[ConfigEntry]) -> Vec<ConfigOp> {
    let key = |e: &ConfigEntry| (e.kind.clone(), e.name.clone());
    let local: BTreeMap<_, _> = local.iter().map(|e| (key(e), e)).collect();
    let remote: BTreeMap<_, _> = remote.iter().map(|e| (key(e), e)).collect();
    let deletes = local
        .keys()
        .filter(|k| !remote.contains_key(*k))
        .map(|(kind, name)| ConfigOp::Delete {
            kind: kind.clone(),
            name: name.clone(),
        });
    let upserts = remote
        .iter()
        .filter(|(k, e)| {
            local
                .get(*k)
                .is_none_or(|mine| mine.without_index() != e.without_index())
        })
        .map(|(_, e)| ConfigOp::Upsert(e.without_index()));
    deletes.chain(upserts).collect()
}

impl Server {
    /// The kinds this secondary asks the primary for: every kind it
    /// understands, less those that stay in their datacenter, and less
    /// `service-intentions` until intentions are config entries here.
    pub(crate) fn replicated_kinds(&self) -> Vec<String> {
        let intentions = self.intentions_writable().is_ok();
        config_entry::KINDS
            .iter()
            .filter(|k| !LOCAL_KINDS.contains(k))
            .filter(|k| !self.config.masked_kinds.iter().any(|m| m == *k))
            .filter(|k| intentions || **k != crate::intentions::INTENTIONS_KIND)
            .map(|k| k.to_string())
            .collect()
    }

    /// Validates one replicated change against this datacenter's entries
    /// and writes it.
    async fn apply_config_op(&self, op: &ConfigOp) -> Result<(), RpcError> {
        let command = match op {
            ConfigOp::Upsert(entry) => {
                let mut entry = entry.clone();
                legate_chain::normalize_entry(&mut entry);
                config_entry::validate(&entry).map_err(RpcError::BadRequest)?;
                legate_chain::validate_entry(&entry).map_err(RpcError::BadRequest)?;
                self.check_chains_after(&entry.kind, &entry.name, Some(&entry))?;
                Command::ConfigEntrySet {
                    entry: Box::new(entry),
                    cas: None,
                }
            }
            ConfigOp::Delete { kind, name } => {
                self.check_chains_after(kind, name, None)?;
                Command::ConfigEntryDelete {
                    kind: kind.clone(),
                    name: name.clone(),
                    cas: None,
                }
            }
        };
        match self.write(command).await? {
            (_, CommandResult::Applied(_)) => Ok(()),
            (_, other) => Err(RpcError::Internal(format!(
                "unexpected config entry result {other:?}"
            ))),
        }
    }
}

/// The kinds the replicator's last round asked for: the primary's index
/// only says the secondary is current for those.
pub(crate) type KindsOfLastRound = Arc<Mutex<Vec<String>>>;

/// How often a blocked round looks whether this datacenter now replicates
/// other kinds (intentions once every server supports them).
const KINDS_RECHECK: Duration = Duration::from_secs(1);

/// Resolves once [`Server::replicated_kinds`] differs from `kinds`.
async fn kinds_change(server: &Server, kinds: &[String]) {
    loop {
        tokio::time::sleep(KINDS_RECHECK).await;
        if server.replicated_kinds() != kinds {
            return;
        }
    }
}

/// One round: a blocking read of the primary's entries of the kinds this
/// datacenter understands, then the difference applied at
/// [`APPLY_RATE`]. Answers the primary's index. When the kinds change
/// (before or during the read) the read starts over without blocking, so
/// a kind newly understood arrives at once rather than at the primary's
/// next change.
pub(crate) async fn round(
    server: Arc<Server>,
    last_index: u64,
    kinds_of_last_round: KindsOfLastRound,
) -> Result<u64, RpcError> {
    let (remote, primary) = server.to_primary()?;
    let (kinds, fetched) = loop {
        let kinds = server.replicated_kinds();
        let same_kinds = *kinds_of_last_round
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            == kinds;
        let index = if same_kinds { last_index } else { 0 };
        let options = fetch_options(&server, &primary, index);
        let read = remote.config_list_all(&options, kinds.clone());
        tokio::select! {
            fetched = read => break (kinds, fetched?),
            () = kinds_change(&server, &kinds) => {
                *kinds_of_last_round.lock().unwrap_or_else(|e| e.into_inner()) = Vec::new();
            }
        }
    };
    // The answer may hold kinds an older primary sends regardless.
    let wanted: Vec<ConfigEntry> = fetched
        .value
        .into_iter()
        .filter(|e| kinds.contains(&e.kind))
        .collect();
    let local = server.store.read().config_entries_of_kinds(&kinds).1;
    let mut pending = plan(&local, &wanted);
    let mut pace = TokenBucket::new(APPLY_RATE, APPLY_RATE as u32);
    let mut applied = 0usize;
    loop {
        let mut refused = Vec::new();
        let before = pending.len();
        for op in pending {
            pace.take().await;
            match server.apply_config_op(&op).await {
                Ok(()) => applied += 1,
                // Only a refusal by validation is skipped; anything else
                // (no leader, storage) fails the round.
                Err(RpcError::BadRequest(reason)) => refused.push((op, reason)),
                Err(e) => return Err(e),
            }
        }
        if refused.is_empty() || refused.len() == before {
            for (op, reason) in &refused {
                tracing::error!(
                    entry = %op.label(),
                    error = %reason,
                    "replication: skipping a config entry this datacenter cannot validate"
                );
            }
            break;
        }
        pending = refused.into_iter().map(|(op, _)| op).collect();
    }
    if applied > 0 {
        tracing::debug!(
            applied,
            index = fetched.meta.index,
            "replication: config entries applied"
        );
    }
    *kinds_of_last_round
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = kinds;
    Ok(fetched.meta.index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(kind: &str, name: &str, body: serde_json::Value, index: u64) -> ConfigEntry {
        let mut value = body;
        value["Kind"] = json!(kind);
        value["Name"] = json!(name);
        value["ModifyIndex"] = json!(index);
        config_entry::from_json(value).unwrap()
    }

    #[test]
    fn plan_deletes_what_the_primary_lacks_and_writes_what_differs() {
        let local = vec![
            entry("service-defaults", "web", json!({"Protocol": "http"}), 10),
            entry("service-defaults", "gone", json!({}), 11),
            entry("service-resolver", "db", json!({}), 12),
        ];
        let remote = vec![
            // Same content at another index: nothing to do.
            entry("service-defaults", "web", json!({"Protocol": "http"}), 90),
            entry(
                "service-resolver",
                "db",
                json!({"ConnectTimeout": "5s"}),
                91,
            ),
            entry("proxy-defaults", "global", json!({}), 92),
        ];
        let ops = plan(&local, &remote);
        let labels: Vec<String> = ops.iter().map(ConfigOp::label).collect();
        assert_eq!(
            labels,
            [
                "service-defaults/gone",
                "proxy-defaults/global",
                "service-resolver/db"
            ]
        );
        assert!(matches!(&ops[0], ConfigOp::Delete { .. }));
        match &ops[2] {
            ConfigOp::Upsert(e) => assert_eq!(e.raft.modify_index, 0, "local indexes are its own"),
            other => panic!("{other:?}"),
        }
        assert!(plan(&remote, &remote).is_empty());
    }
}
