//! The openraft state machine over Legate's [`StateStore`]: applies
//! committed commands in order and builds/installs snapshots (kept on disk
//! beside the log when a data dir is given).

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use legate_state::{CommandResult, StateStore};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::TypeConfig;

type NodeId = u64;

/// A snapshot as kept in memory and on disk.
#[derive(Serialize, Deserialize, Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

#[derive(Default)]
struct Inner {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    snapshot: Option<StoredSnapshot>,
    snapshot_seq: u64,
}

/// The state machine; clones share the same state.
#[derive(Clone)]
pub struct StateMachine {
    store: Arc<StateStore>,
    inner: Arc<Mutex<Inner>>,
    snapshot_path: Option<PathBuf>,
}

fn sm_err(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageError::IO {
        source: StorageIOError::write_state_machine(openraft::AnyError::error(e.to_string())),
    }
}

impl StateMachine {
    /// A state machine over `store`; with `snapshot_dir`, the last snapshot is
    /// loaded from there (restoring the store) and new ones are saved there.
    pub fn new(
        store: Arc<StateStore>,
        snapshot_dir: Option<PathBuf>,
    ) -> Result<StateMachine, String> {
        let snapshot_path = snapshot_dir.map(|d| d.join("snapshot.json"));
        let mut inner = Inner::default();
        if let Some(path) = &snapshot_path {
            if path.exists() {
                let bytes =
                    std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
                let snapshot: StoredSnapshot = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("decoding {}: {e}", path.display()))?;
                store
                    .restore(&snapshot.data)
                    .map_err(|e| format!("restoring {}: {e}", path.display()))?;
                inner.last_applied = snapshot.meta.last_log_id;
                inner.membership = snapshot.meta.last_membership.clone();
                inner.snapshot = Some(snapshot);
            }
        }
        Ok(StateMachine {
            store,
            inner: Arc::new(Mutex::new(inner)),
            snapshot_path,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the tables with the log id of the last entry they include.
    pub(crate) fn consistent_copy(&self) -> (legate_state::SnapshotData, u64, u64) {
        let inner = self.lock();
        let copy = self.store.snapshot_data();
        let (index, term) = inner
            .last_applied
            .map(|l| (l.index, l.leader_id.term))
            .unwrap_or((0, 0));
        (copy, index, term)
    }

    fn persist(&self, snapshot: &StoredSnapshot) -> Result<(), StorageError<NodeId>> {
        let Some(path) = &self.snapshot_path else {
            return Ok(());
        };
        let tmp = path.with_extension("tmp");
        let bytes = serde_json::to_vec(snapshot).map_err(sm_err)?;
        std::fs::write(&tmp, bytes).map_err(sm_err)?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(sm_err)?;
        std::fs::rename(&tmp, path).map_err(sm_err)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        // Copy the tables while holding the lock, so no entry is applied
        // between the copy and the log id it corresponds to; encode and
        // write after releasing it, so applies are not held up.
        let (copy, meta) = {
            let mut inner = self.lock();
            let copy = self.store.snapshot_data();
            inner.snapshot_seq += 1;
            let meta = SnapshotMeta {
                last_log_id: inner.last_applied,
                last_membership: inner.membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    inner.last_applied.map(|l| l.index).unwrap_or(0),
                    inner.snapshot_seq
                ),
            };
            (copy, meta)
        };
        let data = copy.encode().map_err(sm_err)?;
        drop(copy);
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.persist(&stored)?;
        self.lock().snapshot = Some(stored.clone());
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let inner = self.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut results = Vec::new();
        let mut inner = self.lock();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => results.push(CommandResult::Done),
                EntryPayload::Normal(command) => {
                    results.push(self.store.apply(entry.log_id.index, &command))
                }
                EntryPayload::Membership(membership) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), membership);
                    results.push(CommandResult::Done);
                }
            }
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        self.store.restore(&data).map_err(sm_err)?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.persist(&stored)?;
        let mut inner = self.lock();
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.snapshot = Some(stored);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self.lock().snapshot.clone().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
