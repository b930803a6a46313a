//! Sessions and their invalidation (destroy, node removal, critical checks).

use std::time::{Duration, Instant};

use legate_types::{HealthStatus, Session, SessionBehavior};

use crate::{Changes, Table, Tables};

impl Tables {
    pub(crate) fn session_create(
        &mut self,
        index: u64,
        session: &Session,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if session.id.is_empty() {
            return Err("Missing session ID".to_string());
        }
        if self.sessions.contains_key(&session.id) {
            return Err(format!("session {:?} already exists", session.id));
        }
        if !self.nodes.contains_key(&session.node) {
            return Err(format!(
                "Missing node registration for node {:?}",
                session.node
            ));
        }
        for check_id in &session.node_checks {
            self.require_healthy_check(&session.node, check_id)?;
        }
        for check in &session.service_checks {
            self.require_healthy_check(&session.node, &check.id)?;
        }
        let mut session = session.clone();
        session.raft = legate_types::RaftIndex::at(index);
        self.sessions.insert(session.id.clone(), session);
        self.bump(Table::Sessions, index, changes);
        Ok(())
    }

    fn require_healthy_check(&self, node: &str, check_id: &str) -> Result<(), String> {
        match self.checks.get(&(node.to_string(), check_id.to_string())) {
            None => Err(format!("Missing check {check_id:?} registration")),
            Some(c) if c.status() == HealthStatus::Critical => {
                Err(format!("Check {check_id:?} is in critical state"))
            }
            Some(_) => Ok(()),
        }
    }

    /// Destroys a session: its locks are released or their keys deleted,
    /// and those keys get the session's lock delay.
    pub(crate) fn session_destroy(&mut self, index: u64, id: &str, changes: &mut Changes) {
        if !self.sessions.contains_key(id) {
            return;
        }
        self.journal_sessions();
        let Some(session) = self.sessions.remove(id) else {
            return;
        };
        self.bump(Table::Sessions, index, changes);
        self.prepared_queries_of_session_delete(index, id, changes);
        let held = self.kv.held_by(id);
        let delay = Duration::from_nanos(session.lock_delay).min(legate_types::MAX_LOCK_DELAY);
        for key in held {
            match session.behavior {
                SessionBehavior::Release => {
                    self.journal_kv(&key);
                    let released = self.kv.update(&key, |entry| {
                        entry.session.clear();
                        entry.modify_index = index;
                    });
                    if released {
                        self.bump(Table::Kvs, index, changes);
                        changes.kv_keys.insert(key.clone());
                    }
                }
                SessionBehavior::Delete => self.kv_delete(index, &key, changes),
            }
            if !delay.is_zero() {
                self.lock_delays.insert(key, Instant::now() + delay);
            }
        }
    }

    pub(crate) fn invalidate_sessions_for_check(
        &mut self,
        index: u64,
        node: &str,
        check_id: &str,
        changes: &mut Changes,
    ) {
        let doomed: Vec<String> = self
            .sessions
            .values()
            .filter(|s| {
                s.node == node
                    && (s.node_checks.iter().any(|c| c == check_id)
                        || s.service_checks.iter().any(|c| c.id == check_id))
            })
            .map(|s| s.id.clone())
            .collect();
        for id in doomed {
            self.session_destroy(index, &id, changes);
        }
    }

    // ----- reads -----

    /// One session.
    pub fn session(&self, id: &str) -> (u64, Option<Session>) {
        (
            self.table_index(Table::Sessions),
            self.sessions.get(id).cloned(),
        )
    }

    /// All sessions.
    pub fn sessions(&self) -> (u64, Vec<Session>) {
        (
            self.table_index(Table::Sessions),
            self.sessions.values().cloned().collect(),
        )
    }

    /// Sessions on a node.
    pub fn node_sessions(&self, node: &str) -> (u64, Vec<Session>) {
        (
            self.table_index(Table::Sessions),
            self.sessions
                .values()
                .filter(|s| s.node == node)
                .cloned()
                .collect(),
        )
    }
}
