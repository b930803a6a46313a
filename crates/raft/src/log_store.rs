//! The Raft log: entries, vote and committed id. Held in memory for reads;
//! when a data dir is given every change is also written to a redb file and
//! fsync'd before openraft is told it is durable.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use redb::{Database, ReadableDatabase, TableDefinition};

use crate::TypeConfig;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

type NodeId = u64;

#[derive(Default)]
struct Inner {
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    disk: Option<Database>,
}

/// The log store; clones share one log.
#[derive(Clone, Default)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageError::IO {
        source: StorageIOError::write(&e),
    }
}

impl LogStore {
    /// A log kept only in memory (`-dev`).
    pub fn in_memory() -> LogStore {
        LogStore::default()
    }

    /// A log persisted in `dir/raft.db`, loading what is already there.
    pub fn open(dir: &Path) -> Result<LogStore, Box<dyn std::error::Error + Send + Sync>> {
        std::fs::create_dir_all(dir)?;
        let db = Database::create(dir.join("raft.db"))?;
        let txn = db.begin_write()?;
        txn.open_table(LOG)?;
        txn.open_table(META)?;
        txn.commit()?;
        let mut inner = Inner::default();
        {
            let read = db.begin_read()?;
            let log = read.open_table(LOG)?;
            for row in log.range(0u64..)? {
                let (key, value) = row?;
                let entry: Entry<TypeConfig> = serde_json::from_slice(value.value())?;
                inner.entries.insert(key.value(), entry);
            }
            let meta = read.open_table(META)?;
            if let Some(v) = meta.get("vote")? {
                inner.vote = serde_json::from_slice(v.value())?;
            }
            if let Some(v) = meta.get("committed")? {
                inner.committed = serde_json::from_slice(v.value())?;
            }
            if let Some(v) = meta.get("last_purged")? {
                inner.last_purged = serde_json::from_slice(v.value())?;
            }
        }
        inner.disk = Some(db);
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    fn save_meta(
        &self,
        key: &str,
        value: &impl serde::Serialize,
    ) -> Result<(), StorageError<NodeId>> {
        let Some(db) = &self.disk else { return Ok(()) };
        let bytes = serde_json::to_vec(value).map_err(io_err)?;
        let txn = db.begin_write().map_err(io_err)?;
        {
            let mut meta = txn.open_table(META).map_err(io_err)?;
            meta.insert(key, bytes.as_slice()).map_err(io_err)?;
        }
        txn.commit().map_err(io_err)
    }

    fn remove_range(
        &self,
        range: impl RangeBounds<u64> + Clone,
    ) -> Result<(), StorageError<NodeId>> {
        let Some(db) = &self.disk else { return Ok(()) };
        let txn = db.begin_write().map_err(io_err)?;
        {
            let mut log = txn.open_table(LOG).map_err(io_err)?;
            log.retain_in(range, |_, _| false).map_err(io_err)?;
        }
        txn.commit().map_err(io_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .lock()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.lock();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        inner.save_meta("vote", vote)?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        inner.save_meta("committed", &committed)?;
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock();
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        if let Some(db) = &inner.disk {
            let txn = db.begin_write().map_err(io_err)?;
            {
                let mut log = txn.open_table(LOG).map_err(io_err)?;
                for entry in &entries {
                    let bytes = serde_json::to_vec(entry).map_err(io_err)?;
                    log.insert(entry.log_id.index, bytes.as_slice())
                        .map_err(io_err)?;
                }
            }
            txn.commit().map_err(io_err)?;
        }
        for entry in entries {
            inner.entries.insert(entry.log_id.index, entry);
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        inner.remove_range(log_id.index..)?;
        inner.entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        inner.save_meta("last_purged", &Some(log_id))?;
        inner.remove_range(..=log_id.index)?;
        inner.last_purged = Some(log_id);
        let keep = inner.entries.split_off(&(log_id.index + 1));
        inner.entries = keep;
        Ok(())
    }
}
