//! `snapshot save` / `snapshot restore`: the whole state as an archive
//! (`legate_state::archive`), and its replacement through one Raft entry.

use legate_state::archive;
use legate_state::Command;
use legate_types::rpc::SnapshotArchive;
use legate_types::{Queried, QueryOptions, RpcError, WriteOptions};

use crate::{Access, Resource, Server};

impl Server {
    /// Archives the state this server has applied. Default and
    /// `?consistent` reads reach here on the leader (forwarding), `?stale`
    /// on any server.
    pub(crate) async fn save_snapshot(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<SnapshotArchive>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, Resource::Snapshot, Access::Read)?;
        self.check_consistency(opts.consistency).await?;
        let (copy, index, term) = self.raft.state_copy();
        // Encoding and compressing a large state takes a while: off the
        // runtime's threads.
        let bytes = tokio::task::spawn_blocking(move || archive::write_archive(&copy, index, term))
            .await
            .map_err(|e| RpcError::Internal(e.to_string()))?
            .map_err(|e| RpcError::Internal(e.to_string()))?;
        Ok(Queried {
            meta: self.query_meta(index, opts.consistency),
            value: SnapshotArchive(bytes),
        })
    }

    /// Verifies an archive and replaces the state with it through Raft.
    pub(crate) async fn restore_snapshot(
        &self,
        opts: &WriteOptions,
        snapshot: SnapshotArchive,
    ) -> Result<(), RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, Resource::Snapshot, Access::Write)?;
        if snapshot.0.is_empty() {
            return Err(RpcError::BadRequest("the snapshot is empty".into()));
        }
        let pieces = snapshot.0.len() > SnapshotArchive::PIECE_BYTES;
        let limit = if !pieces
            || crate::features::cluster_supports(
                &self.server_features(),
                crate::features::PIECEWISE_RESTORE,
            ) {
            SnapshotArchive::MAX_RESTORE_BYTES
        } else {
            // An older server in the cluster could not apply the pieces.
            SnapshotArchive::PIECE_BYTES
        };
        if snapshot.0.len() > limit {
            return Err(RpcError::BadRequest(format!(
                "the snapshot is {} bytes; a restore takes at most {} MiB",
                snapshot.0.len(),
                limit >> 20
            )));
        }
        // Verified here so a bad archive is refused before it is logged
        // (every server verifies it again when applying).
        let snapshot = tokio::task::spawn_blocking(move || {
            archive::read_archive(&snapshot.0).map(|_| snapshot)
        })
        .await
        .map_err(|e| RpcError::Internal(e.to_string()))?
        .map_err(|e| RpcError::BadRequest(e.to_string()))?;
        if pieces {
            self.restore_in_pieces(snapshot).await?;
        } else {
            self.write(Command::Restore(snapshot)).await?;
        }
        // Session clocks start afresh for the restored sessions.
        self.session_timers.clear_all();
        crate::leader::start_session_clocks(self);
        Ok(())
    }

    /// Logs a large archive as pieces of one entry each, then the commit
    /// that restores it; every server stages the pieces in order. It runs
    /// as a task of its own, so a client that goes away mid-upload does
    /// not leave pieces staged; an upload that fails part way is ended
    /// (its pieces discarded) by a commit of the length staged so far.
    async fn restore_in_pieces(&self, snapshot: SnapshotArchive) -> Result<(), RpcError> {
        let raft = self.raft.clone();
        let task = tokio::spawn(async move {
            let id = uuid::Uuid::new_v4().to_string();
            let length = snapshot.0.len() as u64;
            let mut staged = 0u64;
            for piece in snapshot.0.chunks(SnapshotArchive::PIECE_BYTES) {
                let written = crate::write_through(
                    &raft,
                    Command::RestorePiece {
                        id: id.clone(),
                        offset: staged,
                        data: SnapshotArchive(piece.to_vec()),
                    },
                )
                .await;
                if let Err(e) = written {
                    if staged > 0 {
                        let discard = Command::RestoreCommit {
                            id: id.clone(),
                            length: 0,
                        };
                        let _ = crate::write_through(&raft, discard).await;
                    }
                    return Err(e);
                }
                staged += piece.len() as u64;
            }
            drop(snapshot);
            crate::write_through(&raft, Command::RestoreCommit { id, length })
                .await
                .map(|_| ())
        });
        task.await.map_err(|e| RpcError::Internal(e.to_string()))?
    }
}
