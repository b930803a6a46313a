//! The state store: in-memory tables (nodes, services, checks, KV,
//! sessions, config entries) with secondary indexes, per-row Raft indexes,
//! per-table max indexes, snapshot/restore, and change notification for
//! blocking queries.
//!
//! Every write arrives as a [`Command`] applied at a Raft index, in log
//! order, on every server; [`StateStore::apply`] must therefore be
//! deterministic given the command and the index. (Lock delays are the one
//! exception, as in Consul: they are local, time-based and not replicated.)
//!
//! Depends only on `legate-types` and `legate-filter`; never on Raft, RPC or HTTP.

mod acl;
mod acl_auth;
mod acl_replication;
pub mod archive;
mod autopilot;
mod catalog;
mod check_row;
mod command;
mod config_entries;
mod connect_ca;
mod coordinates;
mod federation_states;
mod interned;
pub mod inventory;
mod kv;
mod kv_rows;
mod prepared_queries;
mod service_row;
mod service_usage;
mod session;
pub mod stream;
mod txn;
mod txn_catalog;
mod ui_views;
mod upload;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use legate_types::config_entry::ConfigEntry;
use legate_types::{HealthCheck, KvEntry, Node, NodeService, Session};
use serde::{Deserialize, Serialize};

pub use acl_replication::AclReplicationBatch;
pub use command::{Command, CommandResult};
pub use connect_ca::StoredCaRoot;
pub use prepared_queries::QueryMatch;
pub use stream::StreamError;
pub use watch::{Changes, Table, WatchSet, Watches};

/// Key of a service or check row: (node name, id).
pub type NodeKey = (String, String);

/// The tables. Readers take a read lock through [`StateStore::read`].
#[derive(Debug, Default, Clone)]
pub struct Tables {
    pub(crate) nodes: BTreeMap<String, Node>,
    /// Service instances in their stored form ([`service_row`]).
    pub(crate) services: BTreeMap<NodeKey, Box<service_row::ServiceRow>>,
    /// Consul's usage counts of the instances, kept as rows change.
    pub(crate) service_usage: service_usage::UsageCounts,
    /// The texts service and check rows share.
    pub(crate) names: interned::Interner,
    pub(crate) services_by_name: BTreeMap<String, BTreeSet<NodeKey>>,
    pub(crate) connect_by_target: BTreeMap<String, BTreeSet<NodeKey>>,
    /// Health checks in their stored form ([`check_row`]).
    pub(crate) checks: BTreeMap<NodeKey, Box<check_row::CheckRow>>,
    pub(crate) kv: kv_rows::KvRows,
    pub(crate) kv_tombstones: BTreeMap<String, u64>,
    /// The highest tombstone index reaped so far: prefix indexes never drop
    /// below it, so reaping never moves a blocking query's index backwards.
    pub(crate) kv_reaped_index: u64,
    pub(crate) sessions: BTreeMap<String, Session>,
    pub(crate) config_entries: BTreeMap<(String, String), ConfigEntry>,
    /// Cluster-wide settings kept in Raft (`cluster-id`, ...).
    pub(crate) system_metadata: BTreeMap<String, String>,
    /// Connect CA roots, active first.
    pub(crate) ca_roots: Vec<StoredCaRoot>,
    /// Connect CA configuration.
    pub(crate) ca_config: Option<legate_types::connect::CaConfiguration>,
    pub(crate) table_index: BTreeMap<String, u64>,
    pub(crate) service_index: BTreeMap<String, u64>,
    /// Local, unreplicated lock delays: key -> instant the delay ends.
    pub(crate) lock_delays: HashMap<String, Instant>,
    /// How many snapshot restores this store has applied (not replicated
    /// state: it only lets blocking queries notice a restore).
    pub(crate) restores: u64,
    /// An archive being restored in pieces.
    pub(crate) restore_upload: Option<upload::RestoreUpload>,
    /// Nodes' network coordinates, by node name.
    pub(crate) coordinates: BTreeMap<String, legate_types::coordinate::Coordinate>,
    /// Federation states, by datacenter.
    pub(crate) federation_states: BTreeMap<String, legate_types::federation_state::FederationState>,
    /// ACL tokens, by AccessorID.
    pub(crate) acl_tokens: BTreeMap<String, legate_types::acl::AclToken>,
    /// SecretID -> AccessorID (derived; rebuilt when a snapshot loads).
    pub(crate) acl_token_secrets: HashMap<String, String>,
    /// Login tokens by (auth method, digest of what they bind) ->
    /// AccessorIDs (derived; rebuilt when a snapshot loads).
    pub(crate) acl_login_tokens: HashMap<(String, u64), std::collections::BTreeSet<String>>,
    /// ACL policies, by ID.
    pub(crate) acl_policies: BTreeMap<String, legate_types::acl::AclPolicy>,
    /// ACL roles, by ID.
    pub(crate) acl_roles: BTreeMap<String, legate_types::acl::AclRole>,
    /// Prepared queries, by ID.
    pub(crate) prepared_queries: BTreeMap<String, legate_types::prepared_query::PreparedQuery>,
    /// ACL auth methods, by name.
    pub(crate) acl_auth_methods: BTreeMap<String, legate_types::acl_auth::AclAuthMethod>,
    /// ACL binding rules, by ID.
    pub(crate) acl_binding_rules: BTreeMap<String, legate_types::acl_auth::AclBindingRule>,
    /// What the transaction being applied changed, for its rollback
    /// (`None` outside transactions).
    pub(crate) journal: Option<Box<txn::Journal>>,
}

/// A copy of the tables (cheap: KV values are shared, not copied), as
/// snapshots store it; see [`stream`] for its stored form.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SnapshotData {
    nodes: Vec<Node>,
    services: Vec<(String, NodeService)>,
    checks: Vec<HealthCheck>,
    kv: Vec<KvEntry>,
    kv_tombstones: Vec<(String, u64)>,
    #[serde(default)]
    kv_reaped_index: u64,
    sessions: Vec<Session>,
    config_entries: Vec<ConfigEntry>,
    #[serde(default)]
    system_metadata: Vec<(String, String)>,
    #[serde(default)]
    ca_roots: Vec<StoredCaRoot>,
    #[serde(default)]
    ca_config: Option<legate_types::connect::CaConfiguration>,
    table_index: Vec<(String, u64)>,
    service_index: Vec<(String, u64)>,
    #[serde(default)]
    coordinates: Vec<(String, legate_types::coordinate::Coordinate)>,
    #[serde(default)]
    federation_states: Vec<legate_types::federation_state::FederationState>,
    #[serde(default)]
    acl_tokens: Vec<legate_types::acl::AclToken>,
    #[serde(default)]
    acl_policies: Vec<legate_types::acl::AclPolicy>,
    #[serde(default)]
    acl_roles: Vec<legate_types::acl::AclRole>,
    #[serde(default)]
    prepared_queries: Vec<legate_types::prepared_query::PreparedQuery>,
    #[serde(default)]
    acl_auth_methods: Vec<legate_types::acl_auth::AclAuthMethod>,
    #[serde(default)]
    acl_binding_rules: Vec<legate_types::acl_auth::AclBindingRule>,
    /// A restore being uploaded in pieces (Raft snapshots only: the
    /// stream writes it as pieces; JSON forms and archives never hold it).
    #[serde(skip)]
    pub(crate) restore_upload: Option<upload::RestoreUpload>,
}

impl Tables {
    /// The max index of a table (0 when never written).
    pub fn table_index(&self, table: Table) -> u64 {
        self.table_index.get(table.name()).copied().unwrap_or(0)
    }

    /// The max index across several tables.
    pub fn max_index(&self, tables: &[Table]) -> u64 {
        tables
            .iter()
            .map(|t| self.table_index(*t))
            .max()
            .unwrap_or(0)
    }

    /// A system metadata value.
    pub fn system_metadata(&self, key: &str) -> Option<&str> {
        self.system_metadata.get(key).map(String::as_str)
    }

    /// About how many bytes the tables hold: KV keys and values exactly,
    /// other rows at a flat estimate. Counts, never walks: the snapshot
    /// policy asks every few seconds, on a runtime worker.
    pub fn approx_bytes(&self) -> u64 {
        const ROW: u64 = 512;
        let kv = self.kv.bytes();
        let rows = self.nodes.len()
            + self.services.len()
            + self.checks.len()
            + self.kv_tombstones.len()
            + self.sessions.len()
            + self.config_entries.len()
            + self.federation_states.len()
            + self.acl_tokens.len()
            + self.acl_policies.len()
            + self.acl_roles.len()
            + self.prepared_queries.len()
            + self.acl_auth_methods.len()
            + self.acl_binding_rules.len();
        kv + rows as u64 * ROW + self.restore_upload_bytes()
    }

    /// The highest index any table has seen.
    pub fn latest_index(&self) -> u64 {
        self.table_index.values().copied().max().unwrap_or(0)
    }

    /// How many snapshot restores this store has applied; a blocking query
    /// that sees it change returns at once, even when its rows' indexes
    /// went back (clients reset on a lower index, as Consul's do).
    pub fn restores(&self) -> u64 {
        self.restores
    }

    /// Replaces every table with `data` as of `index`: each table's and
    /// service's index becomes `index` (old names included, so their
    /// watchers see progress), as does the KV reap floor; lock delays end.
    pub(crate) fn restore_at(&mut self, index: u64, data: SnapshotData, changes: &mut Changes) {
        let mut fresh = Tables::from_snapshot(data);
        let names: Vec<String> = self
            .service_index
            .keys()
            .chain(fresh.service_index.keys())
            .cloned()
            .chain(fresh.services.values().map(|s| s.name().to_string()))
            .collect();
        for name in names {
            fresh.service_index.insert(name, index);
        }
        for table in Table::ALL {
            fresh.table_index.insert(table.name().to_string(), index);
        }
        fresh.kv_reaped_index = fresh.kv_reaped_index.max(index);
        // A restore ends any upload, whatever its archive held.
        fresh.restore_upload = None;
        fresh.restores = self.restores + 1;
        *self = fresh;
        changes.everything = true;
    }

    pub(crate) fn bump(&mut self, table: Table, index: u64, changes: &mut Changes) {
        self.table_index.insert(table.name().to_string(), index);
        changes.tables.insert(table);
    }

    pub(crate) fn bump_service(&mut self, name: &str, index: u64, changes: &mut Changes) {
        self.service_index.insert(name.to_string(), index);
        changes.services.insert(name.to_string());
    }

    fn to_snapshot(&self) -> SnapshotData {
        SnapshotData {
            nodes: self.nodes.values().cloned().collect(),
            services: self
                .services
                .iter()
                .map(|((node, id), s)| (node.clone(), s.to_service(id)))
                .collect(),
            checks: self
                .checks
                .iter()
                .map(|((node, id), c)| c.to_check(node, id))
                .collect(),
            kv: self.kv.values().cloned().collect(),
            kv_reaped_index: self.kv_reaped_index,
            kv_tombstones: self
                .kv_tombstones
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            sessions: self.sessions.values().cloned().collect(),
            config_entries: self.config_entries.values().cloned().collect(),
            system_metadata: self
                .system_metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ca_roots: self.ca_roots.clone(),
            ca_config: self.ca_config.clone(),
            table_index: self
                .table_index
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            service_index: self
                .service_index
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            coordinates: self
                .coordinates
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            federation_states: self.federation_states.values().cloned().collect(),
            acl_tokens: self.acl_tokens.values().cloned().collect(),
            acl_policies: self.acl_policies.values().cloned().collect(),
            acl_roles: self.acl_roles.values().cloned().collect(),
            prepared_queries: self.prepared_queries.values().cloned().collect(),
            acl_auth_methods: self.acl_auth_methods.values().cloned().collect(),
            acl_binding_rules: self.acl_binding_rules.values().cloned().collect(),
            restore_upload: self.restore_upload.clone(),
        }
    }

    fn from_snapshot(data: SnapshotData) -> Tables {
        let mut tables = Tables::default();
        for node in data.nodes {
            tables.nodes.insert(node.node.clone(), node);
        }
        for (node, service) in data.services {
            tables.insert_service_row(node, service);
        }
        for check in data.checks {
            tables.insert_check_row(check);
        }
        for entry in data.kv {
            tables.kv.insert(entry.key.clone(), entry);
        }
        tables.kv_tombstones = data.kv_tombstones.into_iter().collect();
        tables.kv_reaped_index = data.kv_reaped_index;
        for session in data.sessions {
            tables.sessions.insert(session.id.clone(), session);
        }
        tables.config_entries = data
            .config_entries
            .into_iter()
            .map(|e| ((e.kind.clone(), e.name.clone()), e))
            .collect();
        tables.system_metadata = data.system_metadata.into_iter().collect();
        tables.ca_roots = data.ca_roots;
        tables.ca_config = data.ca_config;
        tables.table_index = data.table_index.into_iter().collect();
        tables.service_index = data.service_index.into_iter().collect();
        tables.restore_upload = data.restore_upload;
        tables.coordinates = data.coordinates.into_iter().collect();
        tables.federation_states = data
            .federation_states
            .into_iter()
            .map(|s| (s.datacenter.clone(), s))
            .collect();
        tables.acl_tokens = data
            .acl_tokens
            .into_iter()
            .map(|t| (t.accessor_id.clone(), t))
            .collect();
        tables.acl_policies = data
            .acl_policies
            .into_iter()
            .map(|p| (p.id.clone(), p))
            .collect();
        tables.acl_roles = data
            .acl_roles
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        tables.prepared_queries = data
            .prepared_queries
            .into_iter()
            .map(|q| (q.id.clone(), q))
            .collect();
        tables.acl_auth_methods = data
            .acl_auth_methods
            .into_iter()
            .map(|m| (m.name.clone(), m))
            .collect();
        tables.acl_binding_rules = data
            .acl_binding_rules
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        tables.index_acl_secrets();
        tables
    }
}

/// The state store shared by the FSM (writer) and endpoints (readers).
#[derive(Default)]
pub struct StateStore {
    tables: RwLock<Tables>,
    watches: Watches,
}

impl StateStore {
    /// An empty store.
    pub fn new() -> StateStore {
        StateStore::default()
    }

    /// A read view of the tables.
    pub fn read(&self) -> RwLockReadGuard<'_, Tables> {
        self.tables.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Tables> {
        self.tables.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The subscription registry (subscribe before reading).
    pub fn watches(&self) -> &Watches {
        &self.watches
    }

    /// Wakes every subscription, nothing having changed: a stopping
    /// server's blocking queries then answer with what they hold, with no
    /// query waiting on a shutdown signal of its own.
    pub fn wake_all(&self) {
        let index = self.read().latest_index();
        self.watches.notify_all(index);
    }

    /// Applies one command at `index`. Errors are part of the result (the
    /// command is still consumed by the log), never panics.
    pub fn apply(&self, index: u64, command: &Command) -> CommandResult {
        let mut changes = Changes::default();
        let result = {
            let mut tables = self.write();
            command::apply(&mut tables, index, command, &mut changes)
        };
        if changes.everything {
            self.watches.notify_all(index);
        } else if !changes.is_empty() {
            self.watches.notify(index, &changes);
        }
        result
    }

    /// The whole store in its stored form ([`stream`]), as one buffer.
    pub fn snapshot(&self) -> Result<Vec<u8>, StreamError> {
        self.snapshot_data().to_stream_bytes()
    }

    /// Copies the tables for a snapshot. Only the copy happens under the
    /// read lock; encoding it ([`SnapshotData::encode`]) does not block
    /// writers.
    pub fn snapshot_data(&self) -> SnapshotData {
        self.read().to_snapshot()
    }

    /// Replaces the whole store with a snapshot in its stored form.
    pub fn restore(&self, bytes: &[u8]) -> Result<(), StreamError> {
        self.restore_from(bytes)
    }

    /// Replaces the whole store with a snapshot read from `input` (either
    /// stream version) and wakes every watcher.
    pub fn restore_from(&self, input: impl std::io::Read) -> Result<(), StreamError> {
        let data = SnapshotData::read_from(input)?;
        self.restore_data(data);
        Ok(())
    }

    /// Replaces the whole store with `data` and wakes every watcher.
    pub fn restore_data(&self, data: SnapshotData) {
        let mut tables = Tables::from_snapshot(data);
        let index = tables.latest_index();
        let mut current = self.write();
        tables.restores = current.restores + 1;
        *current = tables;
        drop(current);
        self.watches.notify_all(index);
    }
}

#[cfg(test)]
mod acl_tests;
#[cfg(test)]
mod tests;
