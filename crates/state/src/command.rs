//! FSM commands: the entries of the Raft log. The `Type` tag of each
//! variant is its number; numbers are append-only and never reused, so an
//! old log always decodes (pinned by a test).

use legate_types::config_entry::ConfigEntry;
use legate_types::connect::CaConfiguration;
use legate_types::rpc::{TxnOp, TxnResponse};
use legate_types::{DeregisterRequest, KvOp, RegisterRequest, Session};
use serde::{Deserialize, Serialize};

use crate::{Changes, StoredCaRoot, Tables};

/// One state change, replicated through Raft.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Type", content = "Body")]
pub enum Command {
    /// Register a node, service and checks.
    #[serde(rename = "0")]
    Register(Box<RegisterRequest>),
    /// Remove a node, service or check.
    #[serde(rename = "1")]
    Deregister(DeregisterRequest),
    /// One KV write.
    #[serde(rename = "2")]
    Kv(KvOp),
    /// Create a session (the id is chosen before the command is logged).
    #[serde(rename = "3")]
    SessionCreate(Session),
    /// Destroy a session.
    #[serde(rename = "4")]
    SessionDestroy(String),
    /// An atomic KV transaction.
    #[serde(rename = "5")]
    Txn(Vec<TxnOp>),
    /// Several independent commands written as one log entry (group
    /// commit); each is applied in order at the entry's index and has its
    /// own result. Batches never nest.
    #[serde(rename = "6")]
    Batch(Vec<Command>),
    /// Forget KV tombstones at or below this index (leader's tombstone GC).
    #[serde(rename = "7")]
    ReapTombstones(u64),
    /// Create or replace a config entry; with `cas`, only if its modify
    /// index matches (0: only if absent).
    #[serde(rename = "8")]
    ConfigEntrySet {
        /// The entry.
        entry: Box<ConfigEntry>,
        /// Check-and-set index.
        cas: Option<u64>,
    },
    /// Delete a config entry; with `cas`, only if its modify index matches.
    #[serde(rename = "9")]
    ConfigEntryDelete {
        /// The kind.
        kind: String,
        /// The name.
        name: String,
        /// Check-and-set index.
        cas: Option<u64>,
    },
    /// Set a system metadata key, only if it is not set yet (so concurrent
    /// leaders agree on the first value, e.g. the cluster id).
    #[serde(rename = "10")]
    SystemMetadataInit {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Replace the Connect CA roots and/or configuration at once; with
    /// `cas`, only if the roots' index matches (0: no roots yet).
    #[serde(rename = "11")]
    CaSet {
        /// The full new set of roots (`None`: unchanged).
        roots: Option<Vec<StoredCaRoot>>,
        /// The new configuration (`None`: unchanged).
        config: Option<Box<CaConfiguration>>,
        /// Check-and-set index of the roots.
        cas: Option<u64>,
    },
    /// Replace every table with a snapshot archive's (`snapshot restore`).
    /// The archive is logged compressed and verified again on apply; every
    /// table's index becomes the command's, so indexes never go back.
    #[serde(rename = "12")]
    Restore(legate_types::rpc::SnapshotArchive),
    /// One piece of an archive too large for one entry, staged until
    /// [`Command::RestoreCommit`]. The piece at offset 0 starts a new
    /// upload, replacing an unfinished one; the staged bytes are part of
    /// snapshots, so a server that installs one mid-upload has them too.
    #[serde(rename = "13")]
    RestorePiece {
        /// The upload.
        id: String,
        /// Where the piece starts in the archive.
        offset: u64,
        /// The bytes.
        data: legate_types::rpc::SnapshotArchive,
    },
    /// Restore the staged upload `id` of `length` bytes, as
    /// [`Command::Restore`] does with an archive of its own.
    #[serde(rename = "14")]
    RestoreCommit {
        /// The upload.
        id: String,
        /// Its length in bytes.
        length: u64,
    },
    /// Store nodes' network coordinates (a batch the leader collected);
    /// coordinates of nodes the catalog does not hold are dropped.
    #[serde(rename = "15")]
    CoordinateBatchUpdate(Vec<legate_types::coordinate::CoordinateEntry>),
    /// Create or replace the federation state of its datacenter (written
    /// only once every server advertises `fs`).
    #[serde(rename = "16")]
    FederationStateSet(Box<legate_types::federation_state::FederationState>),
    /// Remove the federation state of a datacenter.
    #[serde(rename = "17")]
    FederationStateDelete(String),
    /// Create or replace an ACL token (validated by the server; written
    /// only once every server advertises `acl`).
    #[serde(rename = "18")]
    AclTokenSet(Box<legate_types::acl::AclToken>),
    /// Delete an ACL token by AccessorID.
    #[serde(rename = "19")]
    AclTokenDelete(String),
    /// Create or replace an ACL policy.
    #[serde(rename = "20")]
    AclPolicySet(Box<legate_types::acl::AclPolicy>),
    /// Delete an ACL policy by ID.
    #[serde(rename = "21")]
    AclPolicyDelete(String),
    /// Create or replace an ACL role.
    #[serde(rename = "22")]
    AclRoleSet(Box<legate_types::acl::AclRole>),
    /// Delete an ACL role by ID.
    #[serde(rename = "23")]
    AclRoleDelete(String),
    /// Bootstrap the ACL system with a management token: applied only if
    /// never bootstrapped, or when `reset_index` is the bootstrap index.
    #[serde(rename = "24")]
    AclBootstrap {
        /// The management token.
        token: Box<legate_types::acl::AclToken>,
        /// The reset index read from `acl-bootstrap-reset`, if any.
        reset_index: Option<u64>,
    },
    /// Create or replace a prepared query (validated by the server;
    /// written only once every server advertises `pq`).
    #[serde(rename = "25")]
    PreparedQuerySet(Box<legate_types::prepared_query::PreparedQuery>),
    /// Delete a prepared query by ID.
    #[serde(rename = "26")]
    PreparedQueryDelete(String),
    /// An atomic transaction holding node, service, check or session
    /// operations (or the `get-or-empty` KV verb) beside KV ones; written
    /// only once every server advertises `txc`, while KV-only
    /// transactions stay [`Command::Txn`] for older servers.
    #[serde(rename = "27")]
    TxnWithCatalog(Vec<TxnOp>),
    /// Replace autopilot's configuration (kept as system metadata, so
    /// snapshots are unchanged); with `cas`, only if the stored one's
    /// modify index matches (0: none stored). Written only once every
    /// server advertises `apc`.
    #[serde(rename = "28")]
    AutopilotConfigSet {
        /// The configuration.
        config: Box<legate_types::rpc::AutopilotConfiguration>,
        /// Check-and-set index.
        cas: Option<u64>,
    },
    /// Create or replace an auth method (written only once every server
    /// advertises `am`).
    #[serde(rename = "29")]
    AclAuthMethodSet(Box<legate_types::acl_auth::AclAuthMethod>),
    /// Delete an auth method with its binding rules and the tokens it
    /// made.
    #[serde(rename = "30")]
    AclAuthMethodDelete(String),
    /// Create or replace a binding rule.
    #[serde(rename = "31")]
    AclBindingRuleSet(Box<legate_types::acl_auth::AclBindingRule>),
    /// Delete a binding rule.
    #[serde(rename = "32")]
    AclBindingRuleDelete(String),
    /// ACL rows replicated from the primary (written only once every
    /// server advertises `ar`); answers `Applied(true)` unless a token was
    /// skipped because a local token holds its SecretID.
    #[serde(rename = "33")]
    AclReplicate(Box<crate::AclReplicationBatch>),
}

impl Command {
    /// The timer Consul's endpoint for this write records (`kvs.apply`,
    /// `catalog.register`, ...), without the prefix; `None` for the
    /// servers' own housekeeping writes.
    pub fn metric_name(&self) -> Option<&'static str> {
        Some(match self {
            Command::Register(_) => "catalog.register",
            Command::Deregister(_) => "catalog.deregister",
            Command::Kv(_) => "kvs.apply",
            Command::SessionCreate(_) | Command::SessionDestroy(_) => "session.apply",
            Command::Txn(_) | Command::TxnWithCatalog(_) => "txn.apply",
            Command::ConfigEntrySet { .. } | Command::ConfigEntryDelete { .. } => {
                "config_entry.apply"
            }
            Command::PreparedQuerySet(_) | Command::PreparedQueryDelete(_) => {
                "prepared-query.apply"
            }
            Command::FederationStateSet(_) | Command::FederationStateDelete(_) => {
                "federation_state.apply"
            }
            Command::AclTokenSet(_)
            | Command::AclTokenDelete(_)
            | Command::AclPolicySet(_)
            | Command::AclPolicyDelete(_)
            | Command::AclRoleSet(_)
            | Command::AclRoleDelete(_)
            | Command::AclAuthMethodSet(_)
            | Command::AclAuthMethodDelete(_)
            | Command::AclBindingRuleSet(_)
            | Command::AclBindingRuleDelete(_) => "acl.apply",
            _ => return None,
        })
    }

    /// The command's number in the log encoding.
    pub fn type_number(&self) -> u32 {
        match self {
            Command::Register(_) => 0,
            Command::Deregister(_) => 1,
            Command::Kv(_) => 2,
            Command::SessionCreate(_) => 3,
            Command::SessionDestroy(_) => 4,
            Command::Txn(_) => 5,
            Command::Batch(_) => 6,
            Command::ReapTombstones(_) => 7,
            Command::ConfigEntrySet { .. } => 8,
            Command::ConfigEntryDelete { .. } => 9,
            Command::SystemMetadataInit { .. } => 10,
            Command::CaSet { .. } => 11,
            Command::Restore(_) => 12,
            Command::RestorePiece { .. } => 13,
            Command::RestoreCommit { .. } => 14,
            Command::CoordinateBatchUpdate(_) => 15,
            Command::FederationStateSet(_) => 16,
            Command::FederationStateDelete(_) => 17,
            Command::AclTokenSet(_) => 18,
            Command::AclTokenDelete(_) => 19,
            Command::AclPolicySet(_) => 20,
            Command::AclPolicyDelete(_) => 21,
            Command::AclRoleSet(_) => 22,
            Command::AclRoleDelete(_) => 23,
            Command::AclBootstrap { .. } => 24,
            Command::PreparedQuerySet(_) => 25,
            Command::PreparedQueryDelete(_) => 26,
            Command::TxnWithCatalog(_) => 27,
            Command::AutopilotConfigSet { .. } => 28,
            Command::AclAuthMethodSet(_) => 29,
            Command::AclAuthMethodDelete(_) => 30,
            Command::AclBindingRuleSet(_) => 31,
            Command::AclBindingRuleDelete(_) => 32,
            Command::AclReplicate(_) => 33,
        }
    }
}

/// The outcome of applying a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandResult {
    /// Applied.
    Done,
    /// Applied a conditional write: whether its condition held.
    Applied(bool),
    /// A transaction's outcome.
    Txn(TxnResponse),
    /// Refused; the message says why.
    Failed(String),
    /// The results of a batch, in order.
    Batch(Vec<CommandResult>),
}

fn restore_archive(
    tables: &mut Tables,
    index: u64,
    archive: &[u8],
    changes: &mut Changes,
) -> CommandResult {
    match crate::archive::read_archive(archive) {
        Ok((_, data)) => {
            tables.restore_at(index, data, changes);
            CommandResult::Done
        }
        Err(e) => CommandResult::Failed(e.to_string()),
    }
}

fn done_or_failed(result: Result<(), String>) -> CommandResult {
    match result {
        Ok(()) => CommandResult::Done,
        Err(e) => CommandResult::Failed(e),
    }
}

pub(crate) fn apply(
    tables: &mut Tables,
    index: u64,
    command: &Command,
    changes: &mut Changes,
) -> CommandResult {
    match command {
        Command::Register(req) => match tables.ensure_registration(index, req, changes) {
            Ok(()) => CommandResult::Done,
            Err(e) => CommandResult::Failed(e),
        },
        Command::Deregister(req) => {
            tables.deregister(index, req, changes);
            CommandResult::Done
        }
        Command::Kv(op) => match tables.kv_apply(index, op, changes) {
            Ok(applied) => CommandResult::Applied(applied),
            Err(e) => CommandResult::Failed(e),
        },
        Command::SessionCreate(session) => match tables.session_create(index, session, changes) {
            Ok(()) => CommandResult::Done,
            Err(e) => CommandResult::Failed(e),
        },
        Command::SessionDestroy(id) => {
            tables.session_destroy(index, id, changes);
            CommandResult::Done
        }
        Command::AutopilotConfigSet { config, cas } => {
            CommandResult::Applied(tables.autopilot_config_set(index, config, *cas))
        }
        Command::Txn(ops) | Command::TxnWithCatalog(ops) => {
            CommandResult::Txn(tables.txn(index, ops, changes))
        }
        Command::ConfigEntrySet { entry, cas } => {
            CommandResult::Applied(tables.config_entry_set(index, entry, *cas, changes))
        }
        Command::ConfigEntryDelete { kind, name, cas } => {
            CommandResult::Applied(tables.config_entry_delete(index, kind, name, *cas, changes))
        }
        Command::SystemMetadataInit { key, value } => {
            let fresh = !tables.system_metadata.contains_key(key);
            if fresh {
                tables.system_metadata.insert(key.clone(), value.clone());
            }
            CommandResult::Applied(fresh)
        }
        Command::CaSet { roots, config, cas } => CommandResult::Applied(tables.ca_set(
            index,
            roots.as_deref(),
            config.as_deref(),
            *cas,
            changes,
        )),
        Command::Restore(archive) => restore_archive(tables, index, &archive.0, changes),
        Command::RestorePiece { id, offset, data } => {
            match tables.stage_restore_piece(id, *offset, &data.0) {
                Ok(()) => CommandResult::Done,
                Err(e) => CommandResult::Failed(e),
            }
        }
        Command::RestoreCommit { id, length } => match tables.take_restore_upload(id, *length) {
            Ok(archive) => restore_archive(tables, index, &archive, changes),
            Err(e) => CommandResult::Failed(e),
        },
        Command::CoordinateBatchUpdate(updates) => {
            tables.coordinates_update(index, updates, changes);
            CommandResult::Done
        }
        Command::FederationStateSet(state) => {
            match tables.federation_state_set(index, state, changes) {
                Ok(()) => CommandResult::Done,
                Err(e) => CommandResult::Failed(e),
            }
        }
        Command::FederationStateDelete(datacenter) => {
            tables.federation_state_delete(index, datacenter, changes);
            CommandResult::Done
        }
        Command::AclTokenSet(token) => done_or_failed(tables.acl_token_set(index, token, changes)),
        Command::AclTokenDelete(accessor) => {
            tables.acl_token_delete(index, accessor, changes);
            CommandResult::Done
        }
        Command::AclPolicySet(policy) => {
            done_or_failed(tables.acl_policy_set(index, policy, changes))
        }
        Command::AclPolicyDelete(id) => {
            tables.acl_policy_delete(index, id, changes);
            CommandResult::Done
        }
        Command::AclRoleSet(role) => done_or_failed(tables.acl_role_set(index, role, changes)),
        Command::AclRoleDelete(id) => {
            tables.acl_role_delete(index, id, changes);
            CommandResult::Done
        }
        Command::AclBootstrap { token, reset_index } => {
            match tables.acl_bootstrap(index, token, *reset_index, changes) {
                Ok(applied) => CommandResult::Applied(applied),
                Err(e) => CommandResult::Failed(e),
            }
        }
        Command::PreparedQuerySet(query) => {
            done_or_failed(tables.prepared_query_set(index, query, changes))
        }
        Command::PreparedQueryDelete(id) => {
            tables.prepared_query_delete(index, id, changes);
            CommandResult::Done
        }
        Command::AclAuthMethodSet(method) => {
            done_or_failed(tables.acl_auth_method_set(index, method, changes))
        }
        Command::AclAuthMethodDelete(name) => {
            tables.acl_auth_method_delete(index, name, changes);
            CommandResult::Done
        }
        Command::AclBindingRuleSet(rule) => {
            done_or_failed(tables.acl_binding_rule_set(index, rule, changes))
        }
        Command::AclBindingRuleDelete(id) => {
            tables.acl_binding_rule_delete(index, id, changes);
            CommandResult::Done
        }
        Command::AclReplicate(batch) => {
            CommandResult::Applied(tables.acl_replicate(index, batch, changes) == 0)
        }
        Command::ReapTombstones(upto) => {
            tables.reap_tombstones(*upto);
            CommandResult::Done
        }
        Command::Batch(commands) => CommandResult::Batch(
            commands
                .iter()
                .map(|c| match c {
                    Command::Batch(_) => {
                        CommandResult::Failed("nested batches are not allowed".into())
                    }
                    other => apply(tables, index, other, changes),
                })
                .collect(),
        ),
    }
}
