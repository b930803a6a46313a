//! Atomic transactions (`/v1/txn`): KV, node, service, check and session
//! operations applied in order at one index, all or none.
//!
//! Rollback is a journal, not a copy of the tables: while a transaction
//! runs, every mutation the tables make records what it is about to
//! change the first time it touches it — a KV key, all rows of a catalog
//! node, the session table (with the prepared queries and lock delays a
//! destroyed session takes along) and the index bookkeeping. When any
//! operation fails, the journal is played back and the tables are exactly
//! as before, side effects (session invalidation, lock releases)
//! included; when none does, it is dropped. Outside a transaction the
//! hooks cost one `Option` check.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use legate_types::coordinate::Coordinate;
use legate_types::prepared_query::PreparedQuery;
use legate_types::rpc::{TxnError, TxnOp, TxnResponse, TxnResult};
use legate_types::{HealthCheck, KvEntry, KvOp, KvVerb, Node, NodeService, Session};

use crate::catalog::on_node;
use crate::{Changes, Tables};

/// What a transaction changed, recorded before it changed it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Journal {
    /// KV keys as they were (entry and tombstone), in the order touched.
    kv: Vec<(String, Option<KvEntry>, Option<u64>)>,
    /// Catalog nodes as they were, with everything on them.
    nodes: BTreeMap<String, NodeRows>,
    /// The session table and what destroying a session changes besides.
    sessions: Option<SessionRows>,
    /// Table indexes as they were.
    table_index: BTreeMap<String, u64>,
    /// Service indexes as they were (taken at the first catalog change).
    service_index: Option<BTreeMap<String, u64>>,
}

/// One catalog node's rows.
#[derive(Debug, Clone)]
struct NodeRows {
    node: Option<Node>,
    services: Vec<NodeService>,
    checks: Vec<HealthCheck>,
    coordinate: Option<Coordinate>,
}

#[derive(Debug, Clone)]
struct SessionRows {
    sessions: BTreeMap<String, Session>,
    prepared_queries: BTreeMap<String, PreparedQuery>,
    lock_delays: HashMap<String, Instant>,
}

impl Tables {
    /// Records `key` before a transaction changes it.
    pub(crate) fn journal_kv(&mut self, key: &str) {
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.kv.push((
                key.to_string(),
                self.kv.get(key).cloned(),
                self.kv_tombstones.get(key).copied(),
            ));
        }
    }

    /// Records every row of `node` before a transaction first changes it.
    pub(crate) fn journal_node(&mut self, node: &str) {
        let Some(journal) = self.journal.as_deref_mut() else {
            return;
        };
        if journal.service_index.is_none() {
            journal.service_index = Some(self.service_index.clone());
        }
        if journal.nodes.contains_key(node) {
            return;
        }
        let rows = NodeRows {
            node: self.nodes.get(node).cloned(),
            services: on_node(&self.services, node)
                .map(|((_, id), s)| s.to_service(id))
                .collect(),
            checks: on_node(&self.checks, node)
                .map(|((node, id), c)| c.to_check(node, id))
                .collect(),
            coordinate: self.coordinates.get(node).cloned(),
        };
        journal.nodes.insert(node.to_string(), rows);
    }

    /// Records the session table before a transaction first changes it.
    pub(crate) fn journal_sessions(&mut self) {
        let Some(journal) = self.journal.as_deref_mut() else {
            return;
        };
        if journal.sessions.is_none() {
            journal.sessions = Some(SessionRows {
                sessions: self.sessions.clone(),
                prepared_queries: self.prepared_queries.clone(),
                lock_delays: self.lock_delays.clone(),
            });
        }
    }

    fn roll_back(&mut self, journal: Journal) {
        for (key, entry, tombstone) in journal.kv.into_iter().rev() {
            match entry {
                Some(entry) => self.kv.insert(key.clone(), entry),
                None => self.kv.remove(&key),
            };
            match tombstone {
                Some(index) => self.kv_tombstones.insert(key, index),
                None => self.kv_tombstones.remove(&key),
            };
        }
        for (name, rows) in journal.nodes {
            let now: Vec<_> = on_node(&self.services, &name)
                .map(|(k, _)| k.clone())
                .collect();
            for key in now {
                self.remove_service_row(&key);
            }
            let checks: Vec<_> = on_node(&self.checks, &name)
                .map(|(k, _)| k.clone())
                .collect();
            for key in checks {
                self.remove_check_row(&key);
            }
            for service in rows.services {
                self.insert_service_row(name.clone(), service);
            }
            for check in rows.checks {
                self.insert_check_row(check);
            }
            match rows.node {
                Some(node) => self.nodes.insert(name.clone(), node),
                None => self.nodes.remove(&name),
            };
            match rows.coordinate {
                Some(coordinate) => self.coordinates.insert(name, coordinate),
                None => self.coordinates.remove(&name),
            };
        }
        if let Some(rows) = journal.sessions {
            self.sessions = rows.sessions;
            self.prepared_queries = rows.prepared_queries;
            self.lock_delays = rows.lock_delays;
        }
        self.table_index = journal.table_index;
        if let Some(service_index) = journal.service_index {
            self.service_index = service_index;
        }
    }

    /// Applies a transaction at `index`: every operation, or none.
    pub(crate) fn txn(&mut self, index: u64, ops: &[TxnOp], changes: &mut Changes) -> TxnResponse {
        self.journal = Some(Box::new(Journal {
            table_index: self.table_index.clone(),
            ..Journal::default()
        }));
        let mut scratch = Changes::default();
        let mut results = Vec::new();
        let mut errors = Vec::new();
        for (op_index, op) in ops.iter().enumerate() {
            let outcome = if op.is_read() {
                self.txn_read_one(op)
            } else {
                self.txn_write_one(index, op, &mut scratch)
            };
            match outcome {
                Ok(mut found) => results.append(&mut found),
                Err(what) => errors.push(TxnError { op_index, what }),
            }
        }
        let journal = self.journal.take().map(|j| *j).unwrap_or_default();
        if !errors.is_empty() {
            self.roll_back(journal);
            return TxnResponse {
                results: None,
                errors: Some(errors),
                index: 0,
            };
        }
        changes.tables.extend(scratch.tables);
        changes.kv_keys.extend(scratch.kv_keys);
        changes.kv_prefixes.extend(scratch.kv_prefixes);
        changes.services.extend(scratch.services);
        TxnResponse {
            results: Some(results),
            errors: None,
            index,
        }
    }

    /// Runs a transaction of reads only (no Raft entry; `?stale` allowed).
    pub fn txn_read(&self, ops: &[TxnOp]) -> TxnResponse {
        let mut results = Vec::new();
        let mut errors = Vec::new();
        for (op_index, op) in ops.iter().enumerate() {
            match self.txn_read_one(op) {
                Ok(mut found) => results.append(&mut found),
                Err(what) => errors.push(TxnError { op_index, what }),
            }
        }
        if errors.is_empty() {
            TxnResponse {
                results: Some(results),
                errors: None,
                index: 0,
            }
        } else {
            TxnResponse {
                results: None,
                errors: Some(errors),
                index: 0,
            }
        }
    }

    fn txn_read_one(&self, op: &TxnOp) -> Result<Vec<TxnResult>, String> {
        match op {
            TxnOp { kv: Some(kv), .. } => Ok(self
                .kv_read_one(kv)?
                .into_iter()
                .map(TxnResult::kv)
                .collect()),
            TxnOp { node: Some(op), .. } => self.txn_node_get(&op.node).map(|n| vec![n]),
            TxnOp {
                service: Some(op), ..
            } => self
                .txn_service_get(&op.node, &op.service.id)
                .map(|s| vec![s]),
            TxnOp {
                check: Some(op), ..
            } => self
                .txn_check_get(&op.check.node, &op.check.check_id)
                .map(|c| vec![c]),
            _ => Err("no operation specified".to_string()),
        }
    }

    fn txn_write_one(
        &mut self,
        index: u64,
        op: &TxnOp,
        changes: &mut Changes,
    ) -> Result<Vec<TxnResult>, String> {
        match op {
            TxnOp { kv: Some(kv), .. } => self.txn_kv_write(index, kv, changes),
            TxnOp { node: Some(op), .. } => self.txn_node(index, op, changes),
            TxnOp {
                service: Some(op), ..
            } => self.txn_service(index, op, changes),
            TxnOp {
                check: Some(op), ..
            } => self.txn_check(index, op, changes),
            TxnOp {
                session: Some(op), ..
            } => self.txn_session(index, op, changes),
            _ => Err("no operation specified".to_string()),
        }
    }

    /// A KV write with Consul's texts when its condition fails; the
    /// result carries the entry without its value.
    fn txn_kv_write(
        &mut self,
        index: u64,
        op: &KvOp,
        changes: &mut Changes,
    ) -> Result<Vec<TxnResult>, String> {
        let key = &op.key;
        if op.verb == KvVerb::Lock && self.lock_delayed(key) {
            return Err(format!("failed to lock key {key:?} due to lock delay"));
        }
        let outcome = self.kv_apply_one(index, op, changes)?;
        if !outcome.applied {
            return Err(match op.verb {
                KvVerb::Cas => format!("failed to set key {key:?}, index is stale"),
                KvVerb::Lock => format!("failed to lock key {key:?}, lock is already held"),
                KvVerb::Unlock => format!(
                    "failed to unlock key {key:?}, lock isn't held, or is held by another session"
                ),
                KvVerb::DeleteCas => format!("failed to delete key {key:?}, index is stale"),
                verb => format!("failed to apply {verb:?} to key {key:?}"),
            });
        }
        Ok(outcome
            .entry
            .map(|mut entry| {
                entry.value = Default::default();
                TxnResult::kv(entry)
            })
            .into_iter()
            .collect())
    }
}
